"""Built-in attention variants, one family per module.

Each module registers its variants with `attnbench.variant.register_variant` when imported; the
modules are declared as entry points of the group ``attnbench.variants`` in pyproject.toml, exactly
like third-party plugins, so importing this package registers nothing by itself.
"""
