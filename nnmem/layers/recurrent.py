"""Recurrent layers (SINGA's RNN and LSTM), unrolled over time: one operator per time step
and gate, so that every memory technique sees each step's tensors."""

from nnmem import autograd
from nnmem.layers.base import Layer, parameter_like


class RNN(Layer):
    """Elman RNN over a list of time steps: h_t = tanh(x_t Wx + h_{t-1} Wh + b) (or relu).
    layer(xs, h0) -> ([h_1, ..., h_T], h_T), xs a list of (batch, input_size) tensors.
    Unrolled: every step is its own operators, so the graph, liveness and recomputation see
    each step's tensors (the tanh outputs are cheap to rebuild in backward)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0, bidirectional=False):  # fmt: skip
        super().__init__()
        _single_layer("RNN", num_layers, batch_first, dropout, bidirectional)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity {nonlinearity!r}; 'tanh' or 'relu'")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.nonlinearity, self.bias = nonlinearity, bias

    def initialize(self, xs, h0):
        self.Wx = parameter_like((self.input_size, self.hidden_size), xs[0])
        self.Wx.gaussian(0.0, 1.0)
        self.Wh = parameter_like((self.hidden_size, self.hidden_size), xs[0])
        self.Wh.gaussian(0.0, 1.0)
        self.b = parameter_like((self.hidden_size,), xs[0])
        self.b.set_value(0.0)

    def forward(self, xs, h0):
        out, h = [], h0
        for x in xs:
            y = autograd.add(autograd.matmul(h, self.Wh), autograd.matmul(x, self.Wx))
            y = autograd.add_bias(y, self.b)
            h = autograd.tanh(y) if self.nonlinearity == "tanh" else autograd.relu(y)
            out.append(h)
        return out, h


class LSTM(Layer):
    """LSTM over a list of time steps (SINGA's equations and parameter names):
        i = sigmoid(x Wx_i + Bx_i + h Wh_i + Bh_i), and f, o likewise; g = tanh(...)
        c' = f * c + i * g,  h' = o * tanh(c')
    layer(xs, (h0, c0)) -> ([h_1, ..., h_T], h_T, c_T). Unrolled over time: the four gates of
    every step are tensors of their own, which recomputation can drop after forward and rebuild
    in backward (sigmoid and tanh are cheap), the LSTM's memory lesson."""

    GATES = ("i", "f", "o", "g")

    def __init__(self, input_size, hidden_size, nonlinearity="tanh", num_layers=1, bias=True,
                 batch_first=False, dropout=0, bidirectional=False):  # fmt: skip
        super().__init__()
        _single_layer("LSTM", num_layers, batch_first, dropout, bidirectional)
        self.input_size, self.hidden_size = input_size, hidden_size

    def initialize(self, xs, h0_c0):
        x, n, h = xs[0], self.input_size, self.hidden_size
        for kind, shape in (("Wx", (n, h)), ("Wh", (h, h))):
            for gate in self.GATES:
                setattr(self, f"{kind}_{gate}", parameter_like(shape, x))
                getattr(self, f"{kind}_{gate}").gaussian(0.0, 0.01)
        for kind in ("Bx", "Bh"):
            for gate in self.GATES:
                setattr(self, f"{kind}_{gate}", parameter_like((h,), x))
                getattr(self, f"{kind}_{gate}").set_value(0.0)

    def _gate(self, gate, x, h):
        y1 = autograd.add_bias(
            autograd.matmul(x, getattr(self, f"Wx_{gate}")), getattr(self, f"Bx_{gate}")
        )
        y2 = autograd.add_bias(autograd.matmul(h, getattr(self, f"Wh_{gate}")),
                               getattr(self, f"Bh_{gate}"))  # fmt: skip
        y = autograd.add(y1, y2)
        return autograd.tanh(y) if gate == "g" else autograd.sigmoid(y)

    def forward(self, xs, h0_c0):
        h, c = h0_c0
        out = []
        for x in xs:
            i, f, o, g = (self._gate(gate, x, h) for gate in self.GATES)
            c = autograd.add(autograd.mul(f, c), autograd.mul(i, g))
            h = autograd.mul(o, autograd.tanh(c))
            out.append(h)
        return out, h, c


def _single_layer(name, num_layers, batch_first, dropout, bidirectional):
    """SINGA's Python RNN and LSTM accept these arguments and ignore them; refuse instead of
    silently building a different network."""
    if num_layers != 1 or batch_first or dropout or bidirectional:
        raise NotImplementedError(
            f"{name}: one layer, time-major, no dropout, one direction (as SINGA's Python "
            "layer computes); stack layers yourself for more"
        )
