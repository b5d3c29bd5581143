# SPDX-License-Identifier: Apache-2.0
"""The examples run and pass: examples/engine_loop.py (numpy, and torch if
importable), and examples/e2e_transformer.py --help (always) and on the
CPU when torch and transformers are importable, as is
examples/sglang_transformer.py. (The packaging backend is
tested in test_packaging.py.)"""

import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
EXAMPLES = os.path.join(TOP, "examples")


def run(args, timeout=300):
    return subprocess.run([sys.executable] + args, capture_output=True,
                          text=True, timeout=timeout, cwd=TOP)


def backends():
    return ["numpy"] + (["torch"] if importlib.util.find_spec("torch")
                        else [])


@pytest.mark.parametrize("backend", backends())
def test_engine_loop(backend):
    r = run([os.path.join(EXAMPLES, "engine_loop.py"), "--backend", backend])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout.splitlines()[-1]
    assert "lookup says 5 restorable" in r.stdout


def test_e2e_help_needs_nothing():
    r = run([os.path.join(EXAMPLES, "e2e_transformer.py"), "--help"])
    assert r.returncode == 0, r.stderr
    assert "--dtype" in r.stdout


def test_e2e_transformer_cpu():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r = run([os.path.join(EXAMPLES, "e2e_transformer.py"), "--device", "cpu",
             "--dtype", "fp32", "--pool", "cpu"], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("PASS")



def test_sglang_transformer():
    """A real transformer's KV restored through kvlink.sglang (on the GPU
    when there is one)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    r = run([os.path.join(EXAMPLES, "sglang_transformer.py")], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].startswith("PASS")
