"""A ViT-B/16 image classifier: patch embedding, class token, learned positions, 12 pre-norm encoder
blocks (bidirectional attention, GELU MLP), final norm and a linear head on the class token."""
import torch
from torch import nn
from torch.nn import functional as F

BATCH, IMG, PATCH, DIM, DEPTH, HEADS, MLP, CLASSES = 32, 224, 16, 768, 12, 12, 3072, 1000
SMALL = {"BATCH": 2, "IMG": 32, "PATCH": 8, "DIM": 64, "DEPTH": 2, "HEADS": 4, "MLP": 128,
         "CLASSES": 10}   # CPU-test sizes (problems/README.md)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, img: int, patch: int, dim: int, depth: int, heads: int, mlp: int, classes: int):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, (img // patch) ** 2 + 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, mlp) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def get_inputs():
    return [torch.randn(BATCH, 3, IMG, IMG)]


def get_init_inputs():
    return [IMG, PATCH, DIM, DEPTH, HEADS, MLP, CLASSES]
