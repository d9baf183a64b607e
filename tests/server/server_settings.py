"""The arguments of the shared test server (conftest.py's `server` fixture) and its API key. A module of
its own, not conftest.py: test files of several folders import `conftest`, and in one pytest run
together the name would find another folder's."""
SERVER_ARGS = ("--kv-cache-blocks", "96", "--max-model-len", "256", "--max-num-seqs", "8",
               "--max-body-bytes", "65536", "--api-key", "sk-test-key")
API_KEY = "sk-test-key"
