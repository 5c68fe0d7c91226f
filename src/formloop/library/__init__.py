"""The template library: one module per template, registered by name."""
from __future__ import annotations

import importlib
from collections.abc import Callable

from formloop.errors import UnknownName
from formloop.template import Template

_REGISTRY: dict[str, Callable[..., Template]] = {}
_MODULES = ("formloop.library.gemm_tiling", "formloop.library.gemm_tiling_gpu", "formloop.library.gemm_epilogue",
            "formloop.library.attention_decode", "formloop.library.attention_prefill",
            "formloop.library.rowwise", "formloop.library.elementwise", "formloop.library.qk_rope",
            "formloop.library.vecops",
            "formloop.library.qwen3_layer_template")
_MODULES = (*_MODULES, "formloop.library.rope")   # rotate-half RoPE over rows of the head dim
_MODULES = (*_MODULES, "formloop.library.gemv_epilogue")   # decode GEMMs on the CUDA cores (M <= 8)


def register_template(name: str):
    """Register a template factory under `name` (keyword options select variants)."""
    def deco(factory: Callable[..., Template]) -> Callable[..., Template]:
        _REGISTRY[name] = factory
        return factory
    return deco


def _load() -> None:
    for module in _MODULES:
        importlib.import_module(module)


def get_template(name: str, **options) -> Template:
    _load()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise UnknownName("template", name, sorted(_REGISTRY)) from None
    return factory(**options)


def template_names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def template_factory(name: str) -> Callable[..., Template]:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownName("template", name, sorted(_REGISTRY)) from None
