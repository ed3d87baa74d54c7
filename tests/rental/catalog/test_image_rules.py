"""The image/driver check by itself (rental.catalog.image_rules)."""

import pytest

from rental.catalog.image_rules import (
    DriverConflict,
    driver_conflict,
    parse_frameworks,
    version_key,
)


@pytest.mark.parametrize(
    ("text", "key"),
    [("12.4", (12, 4)), ("12.0", (12,)), ("12", (12,)), ("550.54.15", (550, 54, 15)), ("", None)],
)
def test_it_reads_versions_as_numbers(text, key):
    assert version_key(text) == key


def test_it_finds_a_cuda_newer_than_the_driver_supports():
    conflict = driver_conflict(
        image_cuda="12.4", image_driver="", offering_max_cuda="12.2", offering_driver="535.183"
    )
    assert conflict == DriverConflict("cuda", "12.4", "12.2")


def test_it_compares_numerically_not_as_text():
    # "12.10" > "12.9" numerically, although it sorts before it as text.
    assert driver_conflict(
        image_cuda="12.10", image_driver="", offering_max_cuda="12.9", offering_driver=""
    ) == DriverConflict("cuda", "12.10", "12.9")
    assert (
        driver_conflict(
            image_cuda="12.9", image_driver="", offering_max_cuda="12.10", offering_driver=""
        )
        is None
    )


def test_it_finds_a_driver_older_than_the_image_needs():
    conflict = driver_conflict(
        image_cuda="12.2", image_driver="550.54", offering_max_cuda="12.2", offering_driver="535.1"
    )
    assert conflict == DriverConflict("driver", "550.54", "535.1")


@pytest.mark.parametrize(
    ("image_cuda", "offering_cuda"),
    [("12.4", "12.4"), ("12.0", "12.4"), ("", "12.2"), ("12.4", "")],
)
def test_it_accepts_what_runs_or_is_not_recorded(image_cuda, offering_cuda):
    assert (
        driver_conflict(
            image_cuda=image_cuda,
            image_driver="",
            offering_max_cuda=offering_cuda,
            offering_driver="",
        )
        is None
    )


def test_it_reads_framework_versions_from_text():
    assert parse_frameworks("PyTorch 2.5, JupyterLab 4, TensorBoard v2.17, CUDA tools") == {
        "PyTorch": "2.5",
        "JupyterLab": "4",
        "TensorBoard": "2.17",
    }
