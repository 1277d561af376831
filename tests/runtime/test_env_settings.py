"""The numeric ``SPMMGNN_*`` environment settings (``spmmgnn.runtime.settings``): a non-finite,
negative or malformed value is one clear line naming the variable, from the code that reads
it and from the command line before any work, never an ``OverflowError`` traceback."""

from __future__ import annotations

import pytest
import torch
from mpi4py import MPI

from spmmgnn import SpmmgnnError
from spmmgnn.backend.device import free_memory
from spmmgnn.runtime.machine import available_bytes, llc_bytes
from spmmgnn.runtime.settings import SETTINGS, env_setting
from spmmgnn.runtime.threads import busy_setting, default_threads

READERS = {  # each setting through the code that uses it
    "SPMMGNN_THREADS": default_threads,
    "SPMMGNN_BUSY_CORES": busy_setting,
    "SPMMGNN_AVAILABLE_MEMORY": available_bytes,
    "SPMMGNN_DEVICE_MEMORY": lambda: free_memory(torch.device("cpu"), MPI.COMM_SELF),
    "SPMMGNN_LLC_BYTES": llc_bytes,
}
BAD = [("inf", "not a finite number"), ("1e400", "not a finite number"),
       ("nan", "not a finite number"), ("-1", "negative"), ("12 GB", "malformed")]


def test_every_numeric_setting_has_a_reader():
    assert set(READERS) == set(SETTINGS)


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("text, why", BAD)
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, name, text, why):
    monkeypatch.setenv(name, text)
    if name == "SPMMGNN_THREADS" and text in ("1e400", "nan", "inf"):
        why = "malformed"  # a count is a whole number as written
    with pytest.raises(SpmmgnnError) as exc:
        READERS[name]()
    message = str(exc.value)
    assert message == f"${name} must be {SETTINGS[name].what}, got {text!r} ({why})"


def test_good_values(monkeypatch):
    for name, text, value in [("SPMMGNN_THREADS", "3", 3), ("SPMMGNN_BUSY_CORES", "1.5", 1.5),
                              ("SPMMGNN_BUSY_CORES", " Auto ", "auto"),
                              ("SPMMGNN_AVAILABLE_MEMORY", "8e9", 8 * 10**9),
                              ("SPMMGNN_AVAILABLE_MEMORY", "0", 0),
                              ("SPMMGNN_DEVICE_MEMORY", "1000.7", 1000),
                              ("SPMMGNN_LLC_BYTES", "4194304", 4194304)]:
        monkeypatch.setenv(name, text)
        assert env_setting(name) == value, name
    assert available_bytes() == 0 and busy_setting() is None and llc_bytes() == 4194304
    monkeypatch.setenv("SPMMGNN_THREADS", "")
    assert env_setting("SPMMGNN_THREADS") is None


@pytest.mark.parametrize("name, text", [("SPMMGNN_AVAILABLE_MEMORY", "inf"),
                                        ("SPMMGNN_AVAILABLE_MEMORY", "-5"),
                                        ("SPMMGNN_BUSY_CORES", "inf"),
                                        ("SPMMGNN_BUSY_CORES", "1e400")])
def test_the_command_line_refuses_them_before_any_work(capsys, monkeypatch, tmp_path, name,
                                                       text):
    from spmmgnn.cli import main

    monkeypatch.setenv(name, text)
    out = tmp_path / "run.json"
    code = main(["train", "--csbm-n", "200", "--epochs", "1", "--hidden", "4", "--quiet",
                 "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert f"${name} must be" in err and repr(text) in err, err
    assert not out.exists()
