"""Flag values checked as they are parsed: a bad one is refused on one line before anything
runs, in argparse's own words (``nnmem train: error: argument --batch-size/--batch: ...``).

Each function is an argparse ``type=``: it turns the text into a value or raises
ArgumentTypeError, whose message argparse prints after the flag's name.
"""

import argparse
import math
import os

from nnmem.memory import parse_bytes


class UsageError(Exception):
    """A flag whose value turns out to be unusable only once the command runs (--device cuda
    on a machine without CUDA, a batch larger than the data set): reported like argparse's
    own errors, on one line."""


def positive_int(text):
    """A whole number of at least 1: batch sizes, epochs, depths, class counts."""
    value = _number(int, text, "a whole number, e.g. 64")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def non_negative_int(text):
    """A whole number of at least 0: random seeds."""
    value = _number(int, text, "a whole number, e.g. 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_float(text):
    """A finite number above 0: learning rates, channel multipliers."""
    value = _number(float, text, "a number, e.g. 0.02")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text):
    """A finite number of at least 0: weight decay."""
    value = _number(float, text, "a number, e.g. 1e-5")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def momentum(text):
    """A momentum coefficient in [0, 1): at 1 or more the velocity never decays and grows
    without bound."""
    value = _number(float, text, "a number, e.g. 0.9")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 0 and below 1 (0.9 is usual), got {text}"
        )
    return value


def byte_size(text):
    """A positive size in bytes, from "4096", "512MiB", "12GiB", "1.5GB"."""
    try:
        value = parse_bytes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, e.g. 512MiB; got {text}")
    return value


def sample_shape(text):
    """One sample's shape, (3, 224, 224) from "3x224x224"."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: write one sample's shape as positive sizes "
            "joined by x, e.g. 3x224x224 or 784"
        )
    return shape


#: What --timeline writes, by the file's extension (any case).
TIMELINE_KINDS = {".png": "a plot", ".html": "the memory viewer"}


def timeline_path(text):
    """A path ending in .png (a plot, matplotlib's) or .html (the memory viewer), any case, in a
    folder that exists: the extension says which file to write, so "out" or "out.json" is
    refused, and a missing folder would be found only after the work the file records."""
    root, ext = os.path.splitext(text)
    if ext.lower() not in TIMELINE_KINDS or not os.path.basename(root):
        stem = root if os.path.basename(root) else os.path.join(root, "timeline")
        kinds = " or ".join(f"{stem}{ext} ({what})" for ext, what in TIMELINE_KINDS.items())
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a .png or .html file name; name one, e.g. {kinds}"
        )
    folder = os.path.dirname(text) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(
            f"{text!r}: the folder {folder!r} does not exist; create it or name a file elsewhere"
        )
    return text


def is_html(path):
    """Does --timeline `path` name the memory viewer (an .html file) rather than a plot?"""
    return os.path.splitext(path)[1].lower() == ".html"


def _number(kind, text, example):
    """int(text) or float(text), finite, or an error saying what was expected. float() reads
    "nan" and "inf" without complaint, and neither is a usable hyperparameter."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {example}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value
