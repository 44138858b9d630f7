"""Flag values checked as they are parsed: a bad one is refused on one line before anything
runs, in argparse's own words (``nnmem train: error: argument --batch-size/--batch: ...``).

Each function is an argparse ``type=``: it turns the text into a value or raises
ArgumentTypeError, whose message argparse prints after the flag's name.
"""

import argparse
import math
import os

from nnmem.memory import parse_bytes
from nnmem.memory.pool import ALIGNMENT

#: The deepest ResNet a --depth may ask for: a 10,000-layer one plans in about 20 s, and the
#: time and memory grow with the depth (an explicit depth of 10**8 ran on without a word).
MAX_DEPTH = 20_000
#: The slowest --link-gbps: at 0.01 GB/s a copy of 100 MB already takes 10 s, and a slower
#: link would make one copy outlast the transfer engine's wait (1e-300 overflowed the clock).
MIN_LINK_GBPS = 0.01


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


def resnet_depth(text):
    """A ResNet depth: a whole number from 1 to MAX_DEPTH (the model's own rules, 6n + 2 and
    so on, are checked when the command runs)."""
    value = positive_int(text)
    if value > MAX_DEPTH:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_DEPTH} (a 10,000-layer ResNet plans in about 20 s; the time and "
            f"memory grow with the depth), got {text}"
        )
    return value


def link_gbps(text):
    """A copy link's speed in GB/s, at least MIN_LINK_GBPS."""
    value = positive_float(text)
    if value < MIN_LINK_GBPS:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_LINK_GBPS:g} GB/s (a GPU's PCIe link moves 8-25), got {text}"
        )
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


def pool_size(text):
    """A pool's size: at least ALIGNMENT bytes, the size of its smallest block."""
    value = byte_size(text)
    if value < ALIGNMENT:
        raise argparse.ArgumentTypeError(
            f"must be at least {ALIGNMENT} bytes (one block of the pool), e.g. 512MiB; got {text}"
        )
    return value


def output_file(text):
    """The name of a file a command writes at its end (a checkpoint, a benchmark's JSON), in a
    folder that exists: checked before the work, which the file is written after."""
    if not text:
        raise argparse.ArgumentTypeError("give a file name, e.g. out.json or cnn.zip")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder; name a file in it, e.g. {os.path.join(text, 'out')!r}"
        )
    _check_folder(text)
    return text


def _check_folder(path):
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(
            f"{path!r}: the folder {folder!r} does not exist; create it or name a file elsewhere"
        )


def png_path(text):
    """A path ending in .png (matplotlib's plot), in a folder that exists."""
    if not text.lower().endswith(".png") or not os.path.basename(text[:-4]):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a .png file name; name one, e.g. out.png"
        )
    _check_folder(text)
    return text


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


def format_shape(shape):
    """A shape as --input writes it: "3x224x224" from (3, 224, 224); sample_shape reads it."""
    return "x".join(map(str, shape))


#: What --timeline writes, by the file's extension (any case).
TIMELINE_KINDS = {".png": "a plot", ".html": "the memory viewer"}


def timeline_path(text):
    """A path ending in .png (a plot, matplotlib's) or .html (the memory viewer), any case, in a
    folder that exists: the extension says which file to write, so "out" or "out.json" is
    refused, and a missing folder would be found only after the work the file records (so
    would a folder named like the file, or like the plot's .json beside it)."""
    root, ext = os.path.splitext(text)
    if ext.lower() not in TIMELINE_KINDS or not os.path.basename(root):
        stem = root if os.path.basename(root) else os.path.join(root, "timeline")
        kinds = " or ".join(f"{stem}{ext} ({what})" for ext, what in TIMELINE_KINDS.items())
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a .png or .html file name; name one, e.g. {kinds}"
        )
    _check_folder(text)
    data = root + ".json"  # a plot's data, written beside it
    for path in (text, data) if not is_html(text) else (text,):
        if os.path.isdir(path):
            raise argparse.ArgumentTypeError(
                f"{path!r} is a folder, where --timeline {text} writes a file; name another file"
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
