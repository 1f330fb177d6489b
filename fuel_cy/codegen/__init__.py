"""Pure-Python code generation: contract model -> Jinja2 templates -> fuel_cy/_generated/."""
from .generate import GENERATOR_VERSION, Layout, Result, find_root, generate, generate_all, render

__all__ = ["GENERATOR_VERSION", "Layout", "Result", "find_root", "generate", "generate_all", "render"]
