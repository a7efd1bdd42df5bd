"""Give the carried SmolLM2 and MiniLM directories random weights of their configs' shapes (timings only)."""

import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

root = Path(sys.argv[1])
torch.manual_seed(0)
for name, cls in (("smol", AutoModelForCausalLM), ("minilm", AutoModel)):
    d = root / name
    if (d / "model.safetensors").is_file():
        continue
    model = cls.from_config(AutoConfig.from_pretrained(d))
    model.save_pretrained(d)
    print(name, sum(p.numel() for p in model.parameters()), "parameters (random)", flush=True)
