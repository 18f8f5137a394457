"""Co-search studies: YAML specs, the Optuna driver, quality proxies."""
