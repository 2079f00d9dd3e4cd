"""The pipeline's own code: the config, the rules' functions, the commands (README.md, Layout)."""
