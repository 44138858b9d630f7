"""The model zoo: each model is a Model subclass with a create_model(**kw) factory."""
from nnmem.models import cnn, mlp, resnet

MODELS = {"cnn": cnn, "mlp": mlp, "resnet": resnet}


def create_model(name, **kwargs):
    """create_model("cnn" | "mlp" | "resnet", ...) -> a Model, or a clear error for other names."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    return MODELS[name].create_model(**kwargs)
