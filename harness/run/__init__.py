"""A stage's runs: plan, driver, the one agent loop, run context, prompts and tools."""
