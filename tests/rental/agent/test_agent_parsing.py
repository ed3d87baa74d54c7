"""The agent's own reading of nvidia-smi, as a library: real output shapes, and refusals."""

import importlib.util
import sys
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


FAKE_TORCH = """
bfloat16 = "torch.bfloat16"
float16 = "torch.float16"
__version__ = "2.5.1-fake"


class _Matrix:
    def __matmul__(self, other):
        return self


def randn(*shape, device=None, dtype=None):
    return _Matrix()


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 2

    @staticmethod
    def is_bf16_supported():
        return True

    @staticmethod
    def synchronize(*args):
        pass

    class device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False
"""


def test_it_burns_every_gpu_with_the_images_pytorch(tmp_path, monkeypatch):
    (tmp_path / "torch.py").write_text(FAKE_TORCH)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    result = agent.burn(sys.executable, 0.2, size=64)

    assert result["dtype"] == "bfloat16"
    assert result["seconds"] == 0.2
    assert len(result["tflops"]) == 2
    assert agent.frameworks(sys.executable)["torch"] == {
        "installed": True,
        "cuda": True,
        "version": "2.5.1-fake",
    }


def test_it_skips_the_burn_without_pytorch(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert agent.burn(sys.executable, 0.1)["skipped"] == "PyTorch is not installed"
