"""Layer 6: the recipe steps (build data → answer → report; later collect, calibrate, ...), the registry that
names them, and the runner that caches each stage's output by the hash of its inputs and config."""
