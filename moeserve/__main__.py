"""`python -m moeserve ...` runs the `moeserve` command (moeserve/cli.py), as vLLM's and SGLang's modules do."""
import sys

from moeserve.cli import main

sys.exit(main())
