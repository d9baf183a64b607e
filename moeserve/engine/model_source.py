"""`--model`: a checkpoint directory, or a Hugging Face model name (`org/name`) resolved through
huggingface_hub's cache, as vLLM and every Hugging Face tool resolve it.

    --model /data/qwen3-30b            a directory holding config.json and *.safetensors
    --model Qwen/Qwen3-30B-A3B-FP8     the snapshot of refs/main in the Hugging Face cache
                                       (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)

A name is looked up in the local cache first; a cached snapshot with config.json and weights is used
without touching the network. Otherwise it is downloaded (config, safetensors weights, tokenizer and
chat-template files), as vLLM does, unless HF_HUB_OFFLINE=1 forbids it. The resolved directory
replaces the name in the engine's config (every rank reads that directory) and the name becomes the
served model name unless --served-model-name says otherwise (vLLM's default too).

`--chat-template FILE` (read here once; the template text itself is accepted too, as vLLM's flag
takes it) replaces the checkpoint's chat template in the server's tokenizer.

Mistakes are one ConfigError line (`moeserve serve` exits 2): a path that does not exist, a directory
without config.json, and a name that is neither a directory nor in the cache (offline) nor on the Hub
each have their own.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

from moeserve.config import EngineConfig
from moeserve.errors import ConfigError

logger = logging.getLogger(__name__)

# what a serving engine needs from a model repository (vLLM downloads the same kinds of files)
DOWNLOAD_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.model", "*.tiktoken", "*.txt", "tokenizer*"]
_TRUE = {"1", "on", "yes", "true"}


def resolve_model_source(config: EngineConfig) -> EngineConfig:
    """`config` with --model as a checkpoint directory (unchanged when it already is one, or unset) and
    --chat-template as the template's text (read from its file once, here)."""
    model, changes = config.model.model, {}
    if model is not None and not model.strip():  # Path('') is the working directory
        raise ConfigError(f"--model {model!r}: name a checkpoint directory or a Hugging Face model (org/name); omit "
                          "--model for the built-in model")
    if config.model.chat_template is not None and not config.model.chat_template.strip():
        raise ConfigError(f"--chat-template {config.model.chat_template!r}: give a template file or the template text")
    if model is not None:
        local = resolve_model_path(model)
        if local != model:
            changes.update(model=local, served_model_name=config.model.served_model_name or model)
    if config.model.chat_template is not None:
        changes["chat_template"] = read_chat_template(config.model.chat_template)
    if not changes:
        return config
    return dataclasses.replace(config, model=dataclasses.replace(config.model, **changes))


def read_chat_template(value: str) -> str:
    """--chat-template: the text of a file, or, as vLLM takes it, the template itself when `value`
    holds Jinja markup and names no file; ConfigError when it is neither or does not parse."""
    import jinja2

    path = Path(value).expanduser()
    is_text = "{{" in value or "{%" in value
    if not is_text or _is_file(path):
        try:
            value = path.read_text()
        except (OSError, ValueError) as e:  # ValueError: a name too long or with NUL for the OS
            reason = getattr(e, "strerror", None) or str(e)
            raise ConfigError(f"cannot read --chat-template {value}: {reason}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"--chat-template {value} is not UTF-8 text") from None
        where = f"--chat-template {path}"
    else:
        where = "--chat-template"
    try:
        jinja2.Environment().parse(value)
    except jinja2.TemplateSyntaxError as e:
        raise ConfigError(f"{where} is not a valid Jinja template (line {e.lineno}: {e.message})") from None
    return value


def _is_file(path: Path) -> bool:
    """Path.is_file, False for a name the OS cannot even look up: template text read as a path has
    stretches longer than a file name may be (ENAMETOOLONG) and may hold NUL (ValueError)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_model_path(model: str) -> str:
    """The checkpoint directory `model` names; ConfigError saying why there is none."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"--model {model} has no config.json: is it a Hugging Face checkpoint directory?")
        return model
    if path.exists():
        raise ConfigError(f"--model {model} is a file; give the checkpoint directory that holds config.json")
    if not _is_model_name(model):
        raise ConfigError(f"--model {model}: no such directory")
    return _from_hub(model)


def _is_model_name(model: str) -> bool:
    """`org/name` or `name` as the Hub spells them; anything path-like (/x, ./x, ~/x, a/b/c) is a path."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if model.startswith(("/", ".", "~")) or model.endswith("/"):
        return False
    try:
        validate_repo_id(model)
    except HFValidationError:
        return False
    return True


def hub_cache() -> str:
    """The cache directory huggingface_hub uses, read from the environment now (not at its import)."""
    from huggingface_hub import constants

    cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return cache
    if os.environ.get("HF_HOME"):
        return str(Path(os.environ["HF_HOME"]) / "hub")
    return constants.HF_HUB_CACHE


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _from_hub(name: str) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

    cache = hub_cache()
    try:
        cached = snapshot_download(name, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError:
        cached = None
    if cached is not None and _complete(cached):
        logger.info("--model %s: %s (the Hugging Face cache)", name, cached)
        return cached
    if hub_offline():
        where = f"the Hugging Face cache {cache}"
        if cached is None:
            raise ConfigError(f"--model {name} is not a local directory and not in {where}; HF_HUB_OFFLINE=1 "
                              "forbids downloading it: unset it, or give the checkpoint directory")
        raise ConfigError(f"--model {name}: the cached snapshot {cached} has no config.json or *.safetensors; "
                          "HF_HUB_OFFLINE=1 forbids downloading the rest: unset it, or give the checkpoint directory")
    logger.info("--model %s: downloading from the Hugging Face Hub into %s", name, cache)
    try:
        return snapshot_download(name, cache_dir=cache, allow_patterns=DOWNLOAD_PATTERNS)
    except GatedRepoError:
        raise ConfigError(f"--model {name} is gated on the Hugging Face Hub: accept its terms on the model page "
                          "and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"--model {name} is not a local directory and not a model on the Hugging Face Hub "
                          "(a private one needs HF_TOKEN)") from None
    except (OSError, ValueError) as e:  # no network, a proxy, a full disk: huggingface_hub's errors are OSErrors
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(f"--model {name} is not a local directory and could not be downloaded ({reason}); "
                          "set HF_HUB_OFFLINE=1 to use only the local cache") from None


def _complete(snapshot: str) -> bool:
    """A cached snapshot that can be served: config.json and at least one *.safetensors file."""
    path = Path(snapshot)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))
