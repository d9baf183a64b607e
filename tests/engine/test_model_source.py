"""--model as a Hugging Face name (engine/model_source.py), resolved through a Hugging Face cache the
test builds (models--org--name/snapshots/<rev>/ + refs/main; nothing touches the network: HF_HUB_OFFLINE=1,
or huggingface_hub's download faked), its one-line errors, and --chat-template."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from moeserve.config import EngineConfig, ModelConfig
from moeserve.engine import model_source
from moeserve.engine.startup_checks import check_startup
from moeserve.errors import ConfigError

REV = "0123456789abcdef0123456789abcdef01234567"


def hf_cache(root: Path, name: str, source: Path) -> Path:
    """A Hugging Face cache under `root` holding `source`'s files as model `name` at refs/main."""
    repo = root / ("models--" + name.replace("/", "--"))
    snapshot = repo / "snapshots" / REV
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REV)
    return snapshot


@pytest.fixture
def cache(tmp_path, monkeypatch):
    from moeserve.engine.builtin_model import builtin_model_dir

    root = tmp_path / "hub"
    snapshot = hf_cache(root, "moeserve-test/tiny-moe", Path(builtin_model_dir()))
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root, snapshot


def test_a_name_in_the_cache_resolves_to_its_snapshot(cache):
    _, snapshot = cache
    config = check_startup(EngineConfig(model=ModelConfig(model="moeserve-test/tiny-moe")))
    assert config.model.model == str(snapshot)
    assert config.model.served_model_name == "moeserve-test/tiny-moe"  # vLLM's default: the name as given
    named = check_startup(EngineConfig(model=ModelConfig(model="moeserve-test/tiny-moe", served_model_name="tiny")))
    assert named.model.served_model_name == "tiny"
    assert check_startup(config) == config  # a directory stays as it is


def test_the_llm_generates_from_a_cached_name_as_from_its_directory(cache):
    from moeserve import LLM, SamplingParams

    _, snapshot = cache
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outs = []
    for model in ("moeserve-test/tiny-moe", str(snapshot)):
        llm = LLM(model=model, kv_cache_blocks=32, kernels="torch")
        try:
            outs.append([o.token_ids for o in llm.generate([[5, 9, 11, 3]], params)])
        finally:
            llm.shutdown()
    assert outs[0] == outs[1] and len(outs[0][0]) == 6


@pytest.mark.parametrize("model,needle", [
    ("moeserve-test/absent", "--model moeserve-test/absent is not a local directory and not in the Hugging Face cache"),
    ("/nonexistent/checkpoint", "--model /nonexistent/checkpoint: no such directory"),
    ("./relative/missing", "--model ./relative/missing: no such directory"),
    ("a/b/c", "--model a/b/c: no such directory"),
])
def test_a_missing_name_and_a_missing_directory_have_their_own_line(cache, model, needle, capsys):
    from moeserve.server import cli

    with pytest.raises(ConfigError, match="^" + needle.replace(".", r"\.")):
        check_startup(EngineConfig(model=ModelConfig(model=model)))
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--model", model])) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_directory_without_config_json_and_a_file_are_named(tmp_path):
    (tmp_path / "weights.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="has no config.json"):
        model_source.resolve_model_path(str(tmp_path))
    with pytest.raises(ConfigError, match="is a file"):
        model_source.resolve_model_path(str(tmp_path / "weights.safetensors"))


def test_online_a_missing_name_is_downloaded_with_the_serving_files(tmp_path, monkeypatch):
    """Online (HF_HUB_OFFLINE unset) a name not in the cache is downloaded, as vLLM does; the download
    is faked here so no test reaches the network."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    from moeserve.engine.builtin_model import builtin_model_dir

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    calls = []

    def fake_download(name, cache_dir=None, local_files_only=False, allow_patterns=None):
        calls.append((name, cache_dir, local_files_only, allow_patterns))
        if local_files_only:
            raise LocalEntryNotFoundError("not cached")
        if name == "org/private":
            import httpx

            raise RepositoryNotFoundError("404", response=httpx.Response(404, request=httpx.Request("GET", "http://x")))
        return str(hf_cache(Path(cache_dir), name, Path(builtin_model_dir())))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    path = model_source.resolve_model_path("org/fresh")
    assert Path(path, "config.json").is_file()
    assert calls[0][2] is True and calls[1][2] is False  # the cache first, then the download
    assert "*.safetensors" in calls[1][3] and "*.json" in calls[1][3] and calls[1][1] == str(tmp_path / "hub")
    with pytest.raises(ConfigError, match="not a model on the Hugging Face Hub"):
        model_source.resolve_model_path("org/private")


def test_chat_template_file_or_text_replaces_the_checkpoints(cache, tmp_path):
    from moeserve.engine.engine_core import load_tokenizer

    _, snapshot = cache
    template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}<go>"
    (tmp_path / "t.jinja").write_text(template)
    for value in (str(tmp_path / "t.jinja"), template):
        config = check_startup(EngineConfig(model=ModelConfig(model=str(snapshot), chat_template=value)))
        assert config.model.chat_template == template
        tok = load_tokenizer(config.model.model, config.model.chat_template)
        text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        assert text == "[user]hi<go>"
    assert load_tokenizer(str(snapshot)).chat_template != template  # the checkpoint's without the flag


@pytest.mark.parametrize("value,needle", [
    ("missing.jinja", "cannot read --chat-template missing.jinja"),
    ("{% for m in messages %}", "--chat-template is not a valid Jinja template"),
])
def test_a_bad_chat_template_exits_2_with_one_line(value, needle, capsys):
    from moeserve.server import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["--chat-template", value])) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_serve_a_name_from_the_hf_cache_with_a_chat_template(tmp_path):
    """`moeserve serve --model org/name --chat-template FILE` over HTTP, the cache offline."""
    import sys

    import httpx

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from server_harness import ServerProcess

    from moeserve.engine.builtin_model import builtin_model_dir

    hf_cache(tmp_path / "hub", "moeserve-test/tiny-moe", Path(builtin_model_dir()))
    template = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}"
    (tmp_path / "chat.jinja").write_text(template)
    srv = ServerProcess("--model", "moeserve-test/tiny-moe", "--chat-template", str(tmp_path / "chat.jinja"),
                        "--kv-cache-blocks", "64", env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"})
    try:
        assert srv.model == "moeserve-test/tiny-moe"
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["moeserve-test/tiny-moe"]
            done = c.post("/v1/completions", json={"model": "moeserve-test/tiny-moe", "prompt": "the cat",
                                                   "max_tokens": 4, "temperature": 0})
            assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 4
            assert c.get("/tokenizer_info").json()["chat_template"] == template
            rendered = c.post("/tokenize", json={"model": "moeserve-test/tiny-moe",
                                                 "messages": [{"role": "user", "content": "hi"}]}).json()
            plain = c.post("/tokenize", json={"model": "moeserve-test/tiny-moe", "prompt": "<<user>>hi",
                                              "add_special_tokens": False}).json()
            assert rendered["tokens"] == plain["tokens"]
    finally:
        srv.kill()


def test_a_long_chat_template_is_read_again_as_text(cache, tmp_path):
    """The engine process checks the front end's config again, whose --chat-template is then the text: a
    template with more than 255 characters between slashes was taken for a path, and os.stat's "File name
    too long" stopped the engine at start-up (a real template file is a few KiB)."""
    _, snapshot = cache
    template = "{% for m in messages %}" + "{{ m.role }} says {{ m.content }}\n" * 12 + "{% endfor %}"
    (tmp_path / "long.jinja").write_text(template)
    for value in (str(tmp_path / "long.jinja"), template):
        config = check_startup(EngineConfig(model=ModelConfig(model=str(snapshot), chat_template=value)))
        assert check_startup(config).model.chat_template == template
