"""The agent's own reading of nvidia-smi, as a library: real output shapes, and refusals."""

import importlib.util
from pathlib import Path

import pytest
from django.conf import settings

spec = importlib.util.spec_from_file_location(
    "gpu_portal_agent", Path(settings.BASE_DIR) / "agent" / "gpu_portal_agent.py"
)
agent = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)

H100 = (
    "0, NVIDIA H100 80GB HBM3, 97, 71234, 81559, 64, 612.48, 0, 0x0000000000000000, 550.90.07\n"
    "1, NVIDIA H100 80GB HBM3, 0, 1, 81559, 31, 69.10, [N/A], 0x0000000000000004, 550.90.07\n"
)


def test_it_reads_each_gpu():
    first, second = agent.parse_query(H100)
    assert first == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "utilization": 97.0,
        "memory_used_mb": 71234.0,
        "memory_total_mb": 81559.0,
        "temperature_c": 64.0,
        "power_w": 612.48,
        "ecc_errors": 0,
        "throttle_reasons": "0x0000000000000000",
        "driver_version": "550.90.07",
    }
    assert second["ecc_errors"] is None  # [N/A] on cards without ECC
    assert second["throttle_reasons"] == "0x0000000000000004"


@pytest.mark.parametrize(
    "output",
    [
        "",
        "0, NVIDIA A100, 5\n",
        "0, NVIDIA A100, lots, 1, 2, 3, 4, 5, 0x0, 550\n",
        "0, NVIDIA A100, [N/A], 1, 2, 3, 4, 5, 0x0, 550\n",
        "No devices were found\n",
    ],
)
def test_it_refuses_output_it_does_not_understand(output):
    with pytest.raises(agent.ReadError):
        agent.parse_query(output)


def test_it_prints_what_it_would_send_without_a_portal(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert agent.main(["--once", "--dry-run", "--metadata-url", "", "--python", "false"]) == 0
    out = capsys.readouterr().out
    assert '"error": "nvidia-smi is not installed"' in out
