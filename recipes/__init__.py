"""Training recipes: functions returning a RunConfig. See drkernel/recipes.py.

This top-level package is a thin alias so that `from recipes import dr_kernel_8b` works from a
checkout; the recipes themselves live in `drkernel.recipes`, which ships with the installed package.
"""

from drkernel.recipes import RECIPES, debug_cpu, dr_kernel_8b, dr_kernel_14b, get_recipe

__all__ = ["RECIPES", "debug_cpu", "dr_kernel_8b", "dr_kernel_14b", "get_recipe"]
