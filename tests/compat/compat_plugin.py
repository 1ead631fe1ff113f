"""compat_plugin.py — a pytest plugin for running llama.cpp's server suite offline
(run_llama_server_suite.sh loads it with -p): the suite's session fixture starts every
preset server once to download its model; here the models are local files
(llama_server_launcher.py maps them), so that warm-up is skipped — it would also start the
model-less "router" preset, which the launcher does not map, and fail the whole session."""
import os
import sys


def pytest_configure(config):
    sys.path.insert(0, os.getcwd())  # the suite's folder (utils.py)
    import utils  # noqa: E402  (the suite's module, shared with its conftest)

    utils.ServerPreset.load_all = staticmethod(lambda: None)
