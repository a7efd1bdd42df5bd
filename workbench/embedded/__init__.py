"""Assets shipped inside the package (data only, read by path: nothing here is imported): the ``smollm2-reader``
LoRA adapter (:data:`workbench.assets.EMBEDDED_ADAPTERS`)."""
