"""The personalization study's methods (second paper), one module each: `build(cfg, ctx) -> Method`.

Their yaml names them `module: personal.<name>`; the agent stages' conditions, one level up,
build an `Access` instead. The two contracts live apart so neither is mistaken for the other.
"""
