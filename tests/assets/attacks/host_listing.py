"""An allow list, not a deny list (issue 32): arbitrary Python (as a shell reached past the gate
would) lists the sandbox's root and tries world-readable files of the host outside the Python
installation. Before, all of them were readable; now the root holds the allow list alone.
"""

import os

PATHS = __PATHS__


import torch
import torch.nn as nn

print("ROOT", sorted(os.listdir("/")), flush=True)
for path in PATHS:
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(40), flush=True)
    except OSError as exc:
        print("DENIED", path, exc.strerror, flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0
