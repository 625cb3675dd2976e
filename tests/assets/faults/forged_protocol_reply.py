"""Fault: the candidate writes a well-formed but forged reply on the sandbox's reply pipe while it is
imported, so every later reply is read one op late. The candidate's doing, so it must not come out
as the judge's infra_error.

expect: runtime_error|hack_detected
kind: protocol
options: static_policy=False
"""

import json
import os
import stat
import struct

import torch
import torch.nn as nn


def forge(message):
    data = json.dumps(message).encode()
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, struct.pack("<Q", len(data)) + data)
        except OSError:
            pass


forge({"ok": True})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0
