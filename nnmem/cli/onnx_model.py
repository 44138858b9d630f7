"""An ONNX file on the command line: ``nnmem plan model.onnx`` plans its training step from the
graph alone, ``nnmem train --onnx model.onnx`` trains it from the weights the file holds.

The graph declares its first input's shape, e.g. (1, 3, 224, 224) or ("batch", 128), where a
name marks a symbolic dimension. nnmem plan's flags replace parts of it: --batch the first
dimension (left out: the graph's own batch, or 1 where it is symbolic), --image-size the
height and width of a 4-D image input, --sequence the length of a token model's (batch,
sequence) input of ids, --input every dimension after the batch. A symbolic dimension the
flags leave open is refused, naming it and the flag that fixes it. nnmem train takes the
shape from its data instead, and refuses a model the data cannot feed.

Every problem is one line: a zoo model's flag given with an ONNX file, an operator the
importer has no converter for (sonnx.Unsupported), a file that is not a model
(sonnx.OnnxFileError).
"""

import os
from typing import NamedTuple

import numpy as np
from onnx import helper, shape_inference
from onnx.external_data_helper import uses_external_data

from nnmem import sonnx
from nnmem.cli.arguments import UsageError, format_shape, positive_int
from nnmem.data.resize import resize_bilinear

#: The flags of nnmem plan that shape a zoo model, and their values when left out: none
#: applies to an ONNX file, whose graph fixes the model.
PLAN_ZOO_FLAGS = {
    "--model": ("model", None),
    "--depth": ("depth", None),
    "--stem": ("stem", None),
    "--block": ("block", None),
    "--width": ("width", 1.0),
    "--num-classes": ("num_classes", None),
    "--find-depth": ("find_depth", False),
    "--dtype float16": ("dtype", "float32"),
}
#: The flags of nnmem plan that only an ONNX file's input has.
ONNX_ONLY_FLAGS = {"--image-size": "image_size", "--sequence": "sequence"}


class GraphInput(NamedTuple):
    """The graph's first input: its name, dtype and declared dimensions (an int, the name of
    a symbolic dimension, or None where the graph says nothing)."""

    name: str
    dtype: np.dtype
    dims: tuple

    @property
    def tokens(self):
        """Does the model take token ids, an integer (batch, sequence) input?"""
        return self.dtype.kind in "iu" and len(self.dims) == 2

    @property
    def image(self):
        """Does the model take images, a float (batch, channels, height, width) input?"""
        return self.dtype.kind == "f" and len(self.dims) == 4

    def written(self):
        """The declared shape as the messages write it: (batch, 3, 224, 224)."""
        return "(" + ", ".join("?" if d is None else str(d) for d in self.dims) + ")"


class OnnxModel(NamedTuple):
    """A checked ONNX file: its path, its ModelProto and its first input."""

    path: str
    proto: object
    input: GraphInput

    @property
    def name(self):
        """The model's name in tables and messages: the file's name."""
        return os.path.basename(self.path)

    def create(self):
        """A new, uninitialised Model of the graph (its weights, absent or not, as read)."""
        return sonnx.SONNXModel(self.proto)

    def refused(self, flag, sample, error):
        """The UsageError for a sample shape the graph's operators refuse (a ValueError)."""
        own = self.input.dims[1:]
        usual = format_shape(own) if all(isinstance(d, int) for d in own) else None
        return UsageError(
            f"argument {flag}: {self.name} cannot take samples of shape {format_shape(sample)} "
            f"({error}); give another {flag}" + (f", e.g. the graph's own {usual}" if usual else "")
        )


def add_plan_arguments(p):
    """nnmem plan's ONNX arguments: the file (positional, or --onnx) and the input's sizes."""
    p.add_argument(
        "onnx_file",
        nargs="?",
        metavar="MODEL.onnx",
        default=None,
        help="an ONNX model to plan instead of a zoo model, from its graph alone (its weights "
        "are not read); the input is the graph's first, with --batch-size, --image-size, "
        "--sequence or --input replacing its sizes",
    )
    p.add_argument("--onnx", metavar="MODEL.onnx", default=None, help="the same as MODEL.onnx")
    p.add_argument(
        "--image-size",
        type=positive_int,
        default=None,
        metavar="N",
        help="with an ONNX model: the height and width of its 4-D image input (default: the "
        "graph's own)",
    )
    p.add_argument(
        "--sequence",
        type=positive_int,
        default=None,
        metavar="N",
        help="with an ONNX model of token ids (batch, sequence): the sequence length (default: "
        "the graph's own)",
    )
    p.set_defaults(onnx_model=None)


def add_train_argument(group):
    """nnmem train's --onnx, in the group that makes it and --model exclusive."""
    group.add_argument(
        "--onnx",
        metavar="MODEL.onnx",
        default=None,
        help="train an ONNX model instead of a zoo model, from the weights the file holds; "
        "the images of --data are resized to the height and width its graph fixes",
    )
    group.set_defaults(onnx_model=None)


def onnx_path(args):
    """nnmem plan's ONNX file (MODEL.onnx or --onnx), or None for a zoo model."""
    if args.onnx_file is not None and args.onnx is not None:
        raise UsageError("argument --onnx: MODEL.onnx is given already; give the file once")
    path = args.onnx_file or args.onnx
    if args.onnx_file is not None and not args.onnx_file.lower().endswith(".onnx"):
        raise UsageError(
            f"argument MODEL.onnx: {path!r} is not an .onnx file; name one, e.g. model.onnx, "
            f"or plan a zoo model with --model {path}"
        )
    return path


def check_zoo_flags(args, path, zoo_flags):
    """Refuse a zoo model's flag (`zoo_flags`: flag -> (attribute, value when left out))
    given with the ONNX file `path`, whose graph fixes what the flag would set."""
    for flag, (attribute, default) in zoo_flags.items():
        if getattr(args, attribute) != default:
            raise UsageError(
                f"argument {flag.split()[0]}: it applies to the zoo's models, and the graph of "
                f"{os.path.basename(path)} fixes what it sets; leave it out"
            )


def check_onnx_only_flags(args):
    """Refuse --image-size or --sequence without an ONNX file."""
    for flag, attribute in ONNX_ONLY_FLAGS.items():
        if getattr(args, attribute) is not None:
            raise UsageError(
                f"argument {flag}: it sizes an ONNX model's input; give one (MODEL.onnx), or "
                "a zoo model's sample with --input, e.g. --input 3x64x64"
            )


def read(path, weights):
    """The OnnxModel in `path`, its graph checked by the importer (every operator converted,
    or sonnx.Unsupported's one line). `weights`: read the external weights too (training);
    planning reads the graph alone."""
    if not os.path.exists(path):
        raise UsageError(f"{path!r}: no such file; give the path of an ONNX model")
    proto = sonnx.load(path, load_external_data=weights)
    sonnx.Graph(proto)  # every operator checked now, before any step is planned or trained
    constants = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in constants]
    if not inputs:
        raise UsageError(f"{path}: the graph has no input to feed; export the model with one")
    v = inputs[0]
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type or 1))
    dims = tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
        for d in v.type.tensor_type.shape.dim
    )
    if not dims:
        raise UsageError(f"{path}: the graph's input {v.name!r} has no batch dimension")
    return OnnxModel(path, proto, GraphInput(v.name, dtype, dims))


def plan_input(args, model):
    """The batch and one sample's shape that nnmem plan plans `model` on (see the module's
    docstring); a symbolic dimension the flags leave open is a UsageError naming it."""
    spec = model.input
    rest = list(spec.dims[1:])
    if args.input is not None:
        for flag in ("--image-size", "--sequence"):
            if getattr(args, ONNX_ONLY_FLAGS[flag]) is not None:
                raise UsageError(f"argument --input: it sets every size {flag} would; give one")
        if len(args.input) != len(rest):
            raise UsageError(
                f"argument --input: the graph's input {spec.name!r} {spec.written()} has "
                f"{len(rest)} dimension(s) after the batch, --input gives {len(args.input)}"
            )
        rest = list(args.input)
    if args.image_size is not None:
        if not spec.image:
            raise UsageError(
                f"argument --image-size: it sets the height and width of a 4-D image input, "
                f"and the graph's input {spec.name!r} is {spec.written()}; leave it out"
            )
        rest[1:3] = [args.image_size] * 2
    if args.sequence is not None:
        if not spec.tokens:
            raise UsageError(
                f"argument --sequence: it sets the length of token ids (batch, sequence), and "
                f"the graph's input {spec.name!r} is {spec.written()} {spec.dtype}; leave it out"
            )
        rest[0] = args.sequence
    for axis, size in enumerate(rest, start=1):
        if not isinstance(size, int) or size < 1:
            what = "an unknown dimension" if size is None else f"the symbolic dimension {size!r}"
            raise UsageError(
                f"{model.name}: the graph's input {spec.name!r} {spec.written()} has {what} "
                f"(axis {axis}); fix it with {_flag_for(spec, axis)}"
            )
    batch = args.batch_size or (spec.dims[0] if isinstance(spec.dims[0], int) else 1)
    return max(batch, 1), tuple(rest)


def _flag_for(spec, axis):
    """The flag that sets `axis` of the input `spec`, with an example value."""
    if spec.image and axis in (2, 3):
        return "--image-size N, e.g. --image-size 224"
    if spec.tokens and axis == 1:
        return "--sequence N, e.g. --sequence 128"
    example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.dims[1:])
    return f"--input, e.g. --input {example}"


def read_for_training(args):
    """nnmem train --onnx: the OnnxModel with its weights, refused on one line if the file has
    none (a graph saved without them: nothing to train from)."""
    check_zoo_flags(args, args.onnx, {"--depth": ("depth", None)})
    model = read(args.onnx, weights=True)
    absent = [t for t in model.proto.graph.initializer if uses_external_data(t)]
    if absent:
        where = {e.value for t in absent for e in t.external_data if e.key == "location"}
        raise UsageError(
            f"argument --onnx: {model.name} holds no weights to train from ({len(absent)} of "
            f"its weights point at {', '.join(sorted(where))}, which is not beside it); give "
            f"the file with its weights, or plan its memory with nnmem plan {args.onnx}"
        )
    return model


def fit_data(model, data_name, x_train, x_test, num_classes):
    """The images of --data as `model`'s input takes them: resized to the height and width
    its graph fixes (bilinear; said on stdout), after checking that the model takes images
    with the data's channels and has an output per class. Otherwise a UsageError: why not."""
    spec, sample = model.input, x_train.shape[1:]
    if spec.tokens:
        raise UsageError(
            f"argument --onnx: {model.name} takes token ids {spec.written()}, and the data "
            f"sets nnmem train loads are images ({data_name}: {format_shape(sample)}); plan "
            f"its memory with nnmem plan {model.path}"
        )
    channels = spec.dims[1] if len(spec.dims) > 1 else None
    if not spec.image or (isinstance(channels, int) and channels != sample[0]):
        takes = f"{channels}-channel images" if spec.image else "inputs"
        raise UsageError(
            f"argument --onnx: {model.name} takes {takes} {spec.written()}, and {data_name} "
            f"holds {sample[0]}-channel ones ({format_shape(sample)}); train it on data of its "
            f"shape (--data), or plan its memory with nnmem plan {model.path}"
        )
    size = tuple(d if isinstance(d, int) else s for d, s in zip(spec.dims[2:], sample[1:]))
    if size != tuple(sample[1:]):
        print(
            f"{data_name}: images resized from {format_shape(sample[1:])} to "
            f"{format_shape(size)}, the size the graph's input fixes"
        )
        x_train, x_test = resize_bilinear(x_train, size), resize_bilinear(x_test, size)
    outputs = _output_size(model)
    if outputs is not None and outputs < num_classes:
        raise UsageError(
            f"argument --onnx: {model.name} has {outputs} outputs, and {data_name} has "
            f"{num_classes} classes: a classifier needs one output per class"
        )
    return x_train, x_test


def _output_size(model):
    """The last dimension of the graph's first output, as the graph declares it or ONNX's
    shape inference finds it (a Gemm's weight fixes it, whatever the batch); None if neither
    can tell."""
    output = model.proto.graph.output[0]
    if not _last_dim(output):
        inferred = shape_inference.infer_shapes(model.proto)
        output = next(v for v in inferred.graph.output if v.name == output.name)
    return _last_dim(output)


def _last_dim(value_info):
    dims = value_info.type.tensor_type.shape.dim
    return dims[-1].dim_value if dims and dims[-1].HasField("dim_value") else None
