"""Write the stand-in data files that SINGA's example scripts read from fixed paths.

    python make_data.py [--dir DIR] [NAME ...]

The scripts are SINGA's, unchanged but for their import lines, so their data must be where and
as they read it. Each stand-in is built from the UCI hand-written digits shipped with nnmem
(nnmem.data.load_digits, 8x8 images resized to 28x28 or 32x32), small enough for a CPU:

  mnist-gz    /tmp/train-images-idx3-ubyte.gz and the three other MNIST IDX files (gzip),
              256 training and 128 test images: cnn/autograd/mnist_cnn.py reads these paths
  mnist-pkl   DIR/mnist.pkl.gz, the pickled (train, valid, test) sets of
              (images float32 (N, 784), labels int64 (N,)), 300/100/100 images:
              gan/vanilla.py and gan/lsgan.py read it from the current folder, rbm/train.py
              from its argument
  text        DIR/digits.txt, the labels of the digits as English words (2,000 characters):
              rnn/char_rnn.py trains on the text file it is given
  cmn         DIR/cmn-eng/cmn-2000.txt, 240 English and Chinese numbers in the anki format
              (English TAB Chinese TAB attribution, e.g. "three one four." and "三一四。"):
              trans/train.py reads --dataset, by default this path from the current folder
  cifar10-py  DIR/cifar-10-batches-py/data_batch_1..5 and test_batch, CIFAR-10's pickled
              batches: cnn/autograd/resnet_cifar10.py reads them from the current folder.
              Only when named: that script fills exactly 10,000 images per batch, so these
              are 60,000 images (180 MB) whatever the stand-in

NAME defaults to all of them but cifar10-py; DIR to the current folder. A file that exists is
never overwritten (it may be the real data set): it is skipped, saying so.
"""

import argparse
import gzip
import os
import pathlib
import pickle
import tempfile

import numpy as np

from nnmem.data import digits_raw, load_digits

MNIST_GZ_DIR = pathlib.Path("/tmp")  # where mnist_cnn.py reads them, whatever the current folder
ENGLISH = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
CHINESE = "零一二三四五六七八九"
ATTRIBUTION = "stand-in written by nnmem's examples/singa/make_data.py"


def digit_bytes(size):
    """The shipped digits resized to size x size, as MNIST's and CIFAR's files store images:
    (train images uint8 (N, size, size), train labels uint8, test images, test labels)."""
    x_train, y_train, x_test, y_test = load_digits(size=size)
    return (
        np.round(x_train[:, 0] * 255).astype(np.uint8),
        y_train.astype(np.uint8),
        np.round(x_test[:, 0] * 255).astype(np.uint8),
        y_test.astype(np.uint8),
    )


def idx_gz(array):
    """An IDX file of uint8 values, gzip-compressed as MNIST is distributed: 0, 0, the type
    code 8, the number of dimensions, each dimension as a big-endian uint32, then the bytes.
    (SINGA's reader checks the first four bytes as the integers 2051 for images, 2049 for
    labels.) No time stamp: the same bytes at every run, so a test recognises its stand-ins."""
    header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    return gzip.compress(header + array.tobytes(), mtime=0)


def mnist_gz(folder=None):
    """The four MNIST files, always in /tmp (`folder` is not used: mnist_cnn.py reads there)."""
    x_train, y_train, x_test, y_test = digit_bytes(28)
    parts = {
        "train-images-idx3-ubyte.gz": x_train[:256],
        "train-labels-idx1-ubyte.gz": y_train[:256],
        "t10k-images-idx3-ubyte.gz": x_test[:128],
        "t10k-labels-idx1-ubyte.gz": y_test[:128],
    }
    return {MNIST_GZ_DIR / name: idx_gz(array) for name, array in parts.items()}


def mnist_pkl(folder):
    """mnist.pkl.gz as deeplearning.net's MNIST pickle: (train, valid, test), each a pair of
    images float32 (N, 784) in [0, 1] and labels int64 (N,)."""
    x_train, y_train, x_test, y_test = digit_bytes(28)

    def part(x, y):
        return (x.reshape(len(x), 784) / np.float32(255)).astype(np.float32), y.astype(np.int64)

    sets = (part(x_train[:300], y_train[:300]), part(x_test[:100], y_test[:100]))
    sets += (part(x_test[100:200], y_test[100:200]),)
    return {folder / "mnist.pkl.gz": gzip.compress(pickle.dumps(sets, protocol=4), mtime=0)}


def text(folder):
    """The digits' labels in the file's order, as English words, ten to a line: a text with a
    small alphabet and a grammar that a character RNN learns in a few epochs."""
    words, length = [], 0
    for label in digits_raw()[1]:
        if length >= 2000:
            break
        words.append(ENGLISH[label])
        length += len(words[-1]) + 1
    lines = [" ".join(words[i : i + 10]) for i in range(0, len(words), 10)]
    return {folder / "digits.txt": ("\n".join(lines) + "\n").encode()}


def cmn(folder):
    """240 numbers of one to four digits (runs of the digits' labels), in English and Chinese,
    in the anki format that trans/data.py parses."""
    labels = digits_raw()[1]
    lines = []
    for i in range(240):
        number = labels[7 * i : 7 * i + 1 + i % 4]
        english = " ".join(ENGLISH[d] for d in number).capitalize() + "."
        chinese = "".join(CHINESE[d] for d in number) + "。"
        lines.append(f"{english}\t{chinese}\t{ATTRIBUTION}")
    return {folder / "cmn-eng" / "cmn-2000.txt": ("\n".join(lines) + "\n").encode()}


def cifar10_py(folder):
    """CIFAR-10's Python batches: pickled dicts of "data", uint8 (10000, 3072) (the red, green
    and blue planes of each 32x32 image), and "labels", a list of 10000 ints; the digits, gray
    (three equal planes), repeated to fill them."""
    x_train, y_train, x_test, y_test = digit_bytes(32)
    batches = [(f"data_batch_{i}", x_train, y_train, 10000 * (i - 1)) for i in range(1, 6)]
    batches.append(("test_batch", x_test, y_test, 0))
    files = {}
    for name, x, y, start in batches:
        index = (start + np.arange(10000)) % len(x)
        planes = np.repeat(x[index][:, None], 3, axis=1).reshape(10000, 3072)
        batch = {"data": planes, "labels": [int(v) for v in y[index]]}
        files[folder / "cifar-10-batches-py" / name] = pickle.dumps(batch, protocol=4)
    return files


MAKERS = {
    "mnist-gz": mnist_gz,
    "mnist-pkl": mnist_pkl,
    "text": text,
    "cmn": cmn,
    "cifar10-py": cifar10_py,
}
DEFAULT = ("mnist-gz", "mnist-pkl", "text", "cmn")


def write_new(path, data):
    """Write `data` at `path` unless a file is there: True if written. The bytes go to a
    temporary file first, linked into place only when complete, so an interrupted run leaves
    no half-written file that a later run would then keep."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(f.name, 0o666 & ~umask)  # a temporary file is private; data files are not
    try:
        os.link(f.name, path)  # fails if the file exists: never overwrites
    except FileExistsError:
        return False
    finally:
        os.unlink(f.name)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(MAKERS))
    parser.add_argument("--dir", default=".", type=pathlib.Path, help="where the files go")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in MAKERS]
    if unknown:
        parser.error(f"unknown data {', '.join(unknown)}; choose from {', '.join(MAKERS)}")
    for name in args.names or DEFAULT:
        for path, data in MAKERS[name](args.dir).items():
            if write_new(path, data):
                print(f"wrote {path}")
            else:
                print(f"skipped {path}: a file is already there (not overwritten)")


if __name__ == "__main__":
    main()
