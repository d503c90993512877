"""PyTorch on the same step tj-bench-model times: the Keras model JSON of examples/models/ built
as a torch.nn.Module (the layers those models use), forward, mean softmax cross-entropy of the
logits and the gradients of every parameter (no optimizer update), batch 64 of random images,
eager mode; prints the median milliseconds of --steps steps.

    python torch_step.py MODEL.json [--batch 64] [--steps 20] [--threads N] [--channels-last]

--channels-last runs the convolutions on NHWC tensors (torch.channels_last), which PyTorch's
oneDNN kernels often prefer on CPUs; the default is PyTorch's NCHW.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


def same_padding(size, kernel, stride, dilation):
    """TensorFlow's "same": (before, after) so that out = ceil(size / stride)."""
    extent = (kernel - 1) * dilation + 1
    total = max((math.ceil(size / stride) - 1) * stride + extent - size, 0)
    return total // 2, total - total // 2


SUPPORTED = ("Conv2D", "DepthwiseConv2D", "Dense", "BatchNormalization", "ReLU", "Activation",
             "ZeroPadding2D", "Add", "GlobalAveragePooling2D", "MaxPooling2D",
             "AveragePooling2D", "Flatten", "Dropout")


class KerasLayer(nn.Module):
    """One Keras layer of the classes above, channels first (N, C, H, W). `in_shape` is its
    input's shape without the batch, so that "same" padding is worked out once, here."""

    def __init__(self, cls, cfg, in_shape):
        super().__init__()
        if cls not in SUPPORTED:
            raise SystemExit(f"torch_step.py: layer {cfg['name']}: {cls} is not supported")
        self.cls, self.cfg = cls, cfg
        self.activation = cfg.get("activation", "linear")
        if self.activation not in ("linear", "relu", "softmax"):  # softmax: folded into the loss
            raise SystemExit(f"torch_step.py: activation {self.activation} is not supported")
        self.pre_pad = None  # (left, right, top, bottom) where "same" is uneven
        in_channels = in_shape[0]
        if cls in ("Conv2D", "DepthwiseConv2D"):
            k, s, d = cfg["kernel_size"], cfg["strides"], cfg["dilation_rate"]
            if cls == "Conv2D":
                out, groups = cfg["filters"], cfg.get("groups", 1)
            else:
                out, groups = in_channels * cfg.get("depth_multiplier", 1), in_channels
            padding = (0, 0)
            if cfg["padding"] == "same":
                h = same_padding(in_shape[1], k[0], s[0], d[0])
                w = same_padding(in_shape[2], k[1], s[1], d[1])
                if h[0] == h[1] and w[0] == w[1]:
                    padding = (h[0], w[0])
                else:
                    self.pre_pad = (w[0], w[1], h[0], h[1])
            self.op = nn.Conv2d(in_channels, out, tuple(k), tuple(s), padding, tuple(d), groups,
                                bias=cfg["use_bias"])
        elif cls == "Dense":
            self.op = nn.Linear(in_channels, cfg["units"], bias=cfg["use_bias"])
        elif cls == "BatchNormalization":
            self.op = nn.BatchNorm2d(in_channels, eps=cfg["epsilon"], momentum=1 - cfg["momentum"],
                                     affine=cfg["center"] and cfg["scale"])
        elif cls == "ReLU":
            assert cfg.get("negative_slope", 0) == 0 and cfg.get("threshold", 0) == 0
        elif cls == "ZeroPadding2D":
            (top, bottom), (left, right) = cfg["padding"]
            self.pre_pad = (left, right, top, bottom)
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            assert cfg["padding"] == "valid"

    def forward(self, *xs):
        x, cls, cfg = xs[0], self.cls, self.cfg
        if self.pre_pad is not None:
            x = F.pad(x, self.pre_pad)
        if cls in ("Conv2D", "DepthwiseConv2D", "Dense", "BatchNormalization"):
            y = self.op(x)
        elif cls == "ReLU":
            y = F.relu(x) if cfg.get("max_value") is None else x.clamp(0, cfg["max_value"])
        elif cls == "Add":
            y = xs[0]
            for other in xs[1:]:
                y = y + other
        elif cls == "GlobalAveragePooling2D":
            y = x.mean(dim=(2, 3))
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            pool = F.max_pool2d if cls == "MaxPooling2D" else F.avg_pool2d
            y = pool(x, tuple(cfg["pool_size"]), tuple(cfg["strides"]))
        elif cls == "Flatten":
            y = x.permute(0, 2, 3, 1).flatten(1) if x.dim() == 4 else x.flatten(1)
        else:  # Activation, ZeroPadding2D (padded above), Dropout
            y = x
        return F.relu(y) if self.activation == "relu" else y


class KerasModel(nn.Module):
    """A Sequential or Functional Keras model JSON; returns the logits."""

    def __init__(self, spec):
        super().__init__()
        cfg = spec["config"]
        self.order, self.inputs = [], {}
        self.layers = nn.ModuleDict()
        previous = None
        for layer in cfg["layers"]:
            name, lcfg = layer["config"]["name"], layer["config"]
            if layer["class_name"] == "InputLayer":
                shape = lcfg["batch_shape"]
                self.input_name, self.input_shape = name, tuple(shape[1:])
                # Two images through each layer as it is built give the next one its input.
                values = {name: torch.zeros(2, shape[3], shape[1], shape[2])}
                previous = name
                continue
            if spec["class_name"] == "Sequential":
                sources = [previous]
            else:
                args = layer["inbound_nodes"][0]["args"][0]
                args = args if isinstance(args, list) else [args]
                sources = [a["config"]["keras_history"][0] for a in args]
            module = KerasLayer(layer["class_name"], lcfg, tuple(values[sources[0]].shape[1:]))
            self.layers[name] = module
            self.inputs[name] = sources
            self.order.append(name)
            previous = name
            with torch.no_grad():
                module.eval()
                values[name] = module(*(values[s] for s in sources))
                module.train()
        self.output_name = self.order[-1]

    def forward(self, x):
        values = {self.input_name: x}
        for name in self.order:
            values[name] = self.layers[name](*(values[s] for s in self.inputs[name]))
        return values[self.output_name]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    p.add_argument("--channels-last", action="store_true")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(a.threads)
    with open(a.model) as f:
        spec = json.load(f)
    torch.manual_seed(1)
    model = KerasModel(spec).train()
    h, w, c = model.input_shape
    x = torch.rand(a.batch, c, h, w)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    classes = model(x[:2]).shape[1]
    y = torch.randint(0, classes, (a.batch,))
    params = [q for q in model.parameters() if q.requires_grad]

    def step():
        loss = F.cross_entropy(model(x), y)
        return loss, torch.autograd.grad(loss, params)

    step()
    ms = []
    for _ in range(a.steps):
        start = time.perf_counter()
        loss, grads = step()
        _ = float(loss.detach())
        ms.append(1000 * (time.perf_counter() - start))
    median = statistics.median(ms)
    layout = "channels_last" if a.channels_last else "NCHW"
    print(f"pytorch {torch.__version__} ({layout}): {spec['config']['name']}: "
          f"{sum(q.numel() for q in params)} trainable parameters: {median:.2f} ms a step "
          f"(median of {a.steps}), {a.batch * 1000 / median:.0f} images/s")


if __name__ == "__main__":
    main()
