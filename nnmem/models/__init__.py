"""The model zoo: each model is a Model subclass with a create_model(**kw) factory."""

from nnmem.models import alexnet, cnn, densenet, inception, mlp, resnet, vgg

MODELS = {
    "cnn": cnn,
    "mlp": mlp,
    "resnet": resnet,
    "alexnet": alexnet,
    "vgg16": vgg,
    "densenet": densenet,
    "inception": inception,
}


def create_model(name, **kwargs):
    """create_model(name, ...) -> a Model (name: a key of MODELS), or a clear error."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name].create_model(**kwargs)
