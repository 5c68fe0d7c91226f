"""A ResNet-50 bottleneck block (stage 1): 1x1 reduce, 3x3, 1x1 expand, each with training-mode
BatchNorm, ReLU between, identity shortcut and a final ReLU."""
import torch
from torch import nn

N, C, WIDTH, H = 64, 256, 64, 56
SMALL = {"N": 2, "C": 32, "WIDTH": 8, "H": 8}   # CPU-test sizes (problems/README.md)


class Model(nn.Module):
    def __init__(self, channels: int, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm2d(width), nn.BatchNorm2d(width), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + x)


def get_inputs():
    return [torch.randn(N, C, H, H)]


def get_init_inputs():
    return [C, WIDTH]
