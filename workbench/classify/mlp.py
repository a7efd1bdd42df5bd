"""A small MLP retrieval-decision classifier, trained with PyTorch Lightning, applied in numpy, stored as JSON.

torch and lightning are imported inside the functions that need them (training and the ONNX trace), so importing
this module (or ``workbench.classify``) stays light, and applying a trained model needs numpy only (the runtime's
path). The weights are small (a few thousand numbers) and are saved as JSON lists through the learned-artifact
protocol (:mod:`workbench.methods.learned`).
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from workbench.calibration.logistic_fit import sigmoid
from workbench.calibration.standardize import fit_standardizer
from workbench.classify.inputs import as_features, as_labels, resolve_feature_names
from workbench.core.errors import ConfigError, DataError
from workbench.core.logs import quiet_lightning

FORMAT_VERSION = 1
"""Version of the dict layout written by :meth:`MLPModel.to_dict`."""


@dataclass(frozen=True)
class MLPConfig:
    """Architecture and training settings of the MLP; invalid values raise ConfigError.

    ``hidden_sizes``: widths of the ReLU hidden layers (empty = logistic regression trained by gradient descent);
    ``dropout``: dropout after each hidden layer; ``learning_rate`` / ``weight_decay``: AdamW settings;
    ``max_epochs``: upper bound on epochs; ``batch_size``: training mini-batch size; ``patience`` / ``min_delta``:
    early stopping on validation BCE (stop after ``patience`` epochs without an improvement larger than
    ``min_delta``).
    """

    hidden_sizes: tuple[int, ...] = (32,)
    dropout: float = 0.0
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    max_epochs: int = 200
    batch_size: int = 64
    patience: int = 10
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        try:
            sizes = tuple(int(h) for h in self.hidden_sizes)
        except (TypeError, ValueError):
            raise ConfigError(
                f"must be a list of layer widths, got {self.hidden_sizes!r}", "mlp.hidden_sizes"
            ) from None
        object.__setattr__(self, "hidden_sizes", sizes)
        checks = [
            ("hidden_sizes", all(h > 0 for h in sizes), "layer widths must be positive"),
            ("dropout", 0.0 <= self.dropout < 1.0, "must be in [0, 1)"),
            ("learning_rate", self.learning_rate > 0, "must be positive"),
            ("weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("max_epochs", self.max_epochs >= 1, "must be >= 1"),
            ("batch_size", self.batch_size >= 1, "must be >= 1"),
            ("patience", self.patience >= 1, "must be >= 1"),
            ("min_delta", self.min_delta >= 0, "must be >= 0"),
        ]
        for key, ok, what in checks:
            if not ok:
                raise ConfigError(f"{what}, got {getattr(self, key)!r}", f"mlp.{key}")

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        out = asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MLPConfig:
        """The config from a dict (as written by :meth:`to_dict`); ConfigError on unknown keys or bad values."""
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"unknown key(s) {unknown}", "mlp")
        return cls(**data)


def _build_network(n_features: int, hidden_sizes: Sequence[int], dropout: float):
    """The MLP as a ``torch.nn.Sequential`` mapping standardised features ``[batch, n]`` to logits ``[batch, 1]``."""
    import torch

    layers: list[torch.nn.Module] = []
    width = n_features
    for hidden in hidden_sizes:
        layers += [torch.nn.Linear(width, hidden), torch.nn.ReLU()]
        if dropout > 0:
            layers.append(torch.nn.Dropout(dropout))
        width = hidden
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


@functools.cache
def _lightning_module_class() -> type:
    """The LightningModule class (defined on first use, so lightning is imported only when training)."""
    import lightning
    import torch

    class MLPClassifierModule(lightning.LightningModule):
        """Trains ``net`` with BCE-with-logits and AdamW; keeps the weights of the epoch with the lowest val loss."""

        def __init__(self, net: torch.nn.Module, learning_rate: float, weight_decay: float) -> None:
            super().__init__()
            self.net = net
            self.learning_rate = learning_rate
            self.weight_decay = weight_decay
            self.loss_fn = torch.nn.BCEWithLogitsLoss()
            self.val_losses: list[float] = []
            self.best_val_loss = math.inf
            self.best_epoch = -1
            self.best_state: dict[str, torch.Tensor] | None = None
            self._val_sum = 0.0
            self._val_count = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x).squeeze(-1)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = self.loss_fn(self(x), y)
            self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=x.shape[0])
            return loss

        def on_validation_epoch_start(self) -> None:
            self._val_sum, self._val_count = 0.0, 0

        def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = self.loss_fn(self(x), y)
            self._val_sum += float(loss) * x.shape[0]
            self._val_count += x.shape[0]
            self.log("val_loss", loss, on_step=False, on_epoch=True, batch_size=x.shape[0])
            return loss

        def on_validation_epoch_end(self) -> None:
            val_loss = self._val_sum / max(self._val_count, 1)
            self.val_losses.append(val_loss)
            if val_loss < self.best_val_loss:
                self.best_val_loss = val_loss
                self.best_epoch = len(self.val_losses) - 1
                self.best_state = {k: t.detach().clone() for k, t in self.net.state_dict().items()}

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay)

    return MLPClassifierModule


@dataclass(eq=False)
class MLPModel:
    """A trained MLP: standardisation (``mean``, ``scale``) + network weights (``state``: name → float32 array).

    ``predict_proba`` gives P(correct) = P(no retrieval needed). ``val_losses`` holds the validation BCE after each
    epoch; ``state`` holds the weights of ``best_epoch`` (0-based), the epoch with the lowest validation loss.
    """

    config: MLPConfig
    mean: np.ndarray
    scale: np.ndarray
    feature_names: tuple[str, ...]
    state: dict[str, Any]
    seed: int
    best_epoch: int
    val_losses: tuple[float, ...] = field(default_factory=tuple)

    kind: ClassVar[str] = "mlp"

    @property
    def n_features(self) -> int:
        """The number of input features."""
        return int(self.mean.size)

    @property
    def epochs_trained(self) -> int:
        """How many epochs ran before training stopped (early stopping or ``max_epochs``)."""
        return len(self.val_losses)

    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The linear layers ``(weight [out, in], bias [out])`` in order (ReLU between them, none after the last)."""
        indices = sorted({int(k.split(".")[0]) for k in self.state if k.endswith(".weight")})
        return [(np.asarray(self.state[f"{i}.weight"]), np.asarray(self.state[f"{i}.bias"])) for i in indices]

    def scoring_module(self):
        """A ``torch.nn.Module`` in eval mode: raw float32 features ``[batch, n]`` → P(correct) ``[batch]``.

        Standardisation and the sigmoid are inside the module; it is what the ONNX export traces (the numpy
        :meth:`predict_proba` computes the same function without torch).
        """
        import torch

        net = _build_network(self.n_features, self.config.hidden_sizes, self.config.dropout)
        net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in self.state.items()}, strict=True)

        class _Scoring(torch.nn.Module):
            def __init__(self, net: torch.nn.Module, mean: np.ndarray, scale: np.ndarray) -> None:
                super().__init__()
                self.net = net
                self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32))
                self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))

            def forward(self, features: torch.Tensor) -> torch.Tensor:
                return torch.sigmoid(self.net((features - self.mean) / self.scale)).squeeze(-1)

        return _Scoring(net, self.mean, self.scale).eval()

    def predict_proba(self, X: object) -> np.ndarray:
        """P(correct) for each row of ``X`` (raw features), a float64 vector ``[rows]``; DataError on bad input.

        Pure numpy (float32 weights, float64 arithmetic): no torch needed, as in the runtime."""

        h = (as_features(X, n_features=self.n_features) - self.mean) / self.scale
        layers = self.layers()
        for i, (weight, bias) in enumerate(layers):
            h = h @ weight.astype(np.float64).T + bias.astype(np.float64)
            if i < len(layers) - 1:
                h = np.maximum(h, 0.0)
        return sigmoid(h.reshape(-1))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: config, feature names, standardisation, the weights as nested lists, training record."""
        return {
            "kind": self.kind,
            "version": FORMAT_VERSION,
            "config": self.config.to_dict(),
            "feature_names": list(self.feature_names),
            "mean": [float(v) for v in self.mean],
            "scale": [float(v) for v in self.scale],
            "state": {k: np.asarray(v, dtype=np.float32).tolist() for k, v in sorted(self.state.items())},
            "seed": int(self.seed),
            "best_epoch": int(self.best_epoch),
            "val_losses": [float(v) for v in self.val_losses],
        }

    @classmethod
    def from_dict(cls, d: Any) -> MLPModel:
        """Rebuild from :meth:`to_dict` output; DataError if the dict is malformed or the weights do not fit the
        recorded architecture."""
        where = "mlp model"
        keys = {"kind", "version", "config", "feature_names", "mean", "scale", "state", "seed", "best_epoch"}
        if not isinstance(d, dict) or d.get("kind") != cls.kind:
            raise DataError("not an MLP description (kind != 'mlp')", where)
        if d.get("version") != FORMAT_VERSION:
            raise DataError(f"unsupported version {d.get('version')!r} (this workbench reads {FORMAT_VERSION})", where)
        missing = sorted(keys - set(d))
        if missing:
            raise DataError(f"missing key(s) {missing}", where)
        try:
            config = MLPConfig.from_dict(d["config"])
            names = tuple(str(n) for n in d["feature_names"])
            mean = np.asarray(d["mean"], dtype=np.float64).reshape(-1)
            scale = np.asarray(d["scale"], dtype=np.float64).reshape(-1)
            state = {str(k): np.asarray(v, dtype=np.float32) for k, v in dict(d["state"]).items()}
        except (TypeError, ValueError, ConfigError) as exc:
            raise DataError(f"malformed MLP description ({exc})", where) from None
        if len(names) != mean.size or scale.size != mean.size:
            raise DataError(f"{len(names)} feature names but standardisation for {mean.size}", where)
        arrays = [mean, scale, *state.values()]
        if not all(np.isfinite(a).all() for a in arrays) or (scale <= 0).any():
            raise DataError("non-finite parameters or non-positive scales", where)
        expected = _build_shapes(mean.size, config.hidden_sizes, config.dropout)
        got = {k: tuple(v.shape) for k, v in state.items()}
        if got != expected:
            raise DataError(f"weights {got} do not fit the architecture {expected}", where)
        return cls(
            config=config,
            mean=mean,
            scale=scale,
            feature_names=names,
            state=state,
            seed=int(d["seed"]),
            best_epoch=int(d["best_epoch"]),
            val_losses=tuple(float(v) for v in d.get("val_losses", ())),
        )


def _build_shapes(n_features: int, hidden_sizes: Sequence[int], dropout: float) -> dict[str, tuple[int, ...]]:
    """The state-dict shapes of :func:`_build_network` (without building it: no torch import)."""
    shapes: dict[str, tuple[int, ...]] = {}
    index, width = 0, n_features
    for hidden in hidden_sizes:
        shapes[f"{index}.weight"], shapes[f"{index}.bias"] = (hidden, width), (hidden,)
        index += 3 if dropout > 0 else 2  # Linear, ReLU (, Dropout)
        width = hidden
    shapes[f"{index}.weight"], shapes[f"{index}.bias"] = (1, width), (1,)
    return shapes


def fit_mlp(
    X_train: object,
    y_train: object,
    X_val: object,
    y_val: object,
    config: MLPConfig | None = None,
    seed: int = 0,
    *,
    feature_names: Sequence[str] | None = None,
) -> MLPModel:
    """Train an MLP on (``X_train``, ``y_train``) with early stopping on the BCE of (``X_val``, ``y_val``).

    Labels: 1 = correct (no retrieval needed). Features are standardised with the training set's mean and scale.
    Training runs on CPU with Lightning, quietly (no progress bar, no checkpoints, no logger files) and
    deterministically for a ``seed`` (weight init, dropout and batch order come from it; the caller's global torch
    random state is left as it was). The returned model holds the weights of the epoch with the lowest validation
    loss. DataError on non-finite features, non-binary or one-class labels, or mismatched widths.
    """
    import lightning
    import torch
    from lightning.pytorch.callbacks import EarlyStopping

    config = config or MLPConfig()
    xt = as_features(X_train, where="X_train")
    yt = as_labels(y_train, xt.shape[0], where="y_train")
    xv = as_features(X_val, n_features=xt.shape[1], where="X_val")
    yv = as_labels(y_val, xv.shape[0], where="y_val", both_classes=False)
    names = resolve_feature_names(feature_names, xt.shape[1])
    mean, scale = fit_standardizer(xt)

    def tensors(x: np.ndarray, y: np.ndarray) -> torch.utils.data.TensorDataset:
        return torch.utils.data.TensorDataset(
            torch.from_numpy(((x - mean) / scale).astype(np.float32)), torch.from_numpy(y.astype(np.float32))
        )

    with torch.random.fork_rng(devices=[]), quiet_lightning(), tempfile.TemporaryDirectory() as root:
        torch.manual_seed(seed)
        net = _build_network(xt.shape[1], config.hidden_sizes, config.dropout)
        module = _lightning_module_class()(net, config.learning_rate, config.weight_decay)
        train_loader = torch.utils.data.DataLoader(
            tensors(xt, yt),
            batch_size=config.batch_size,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),
        )
        val_loader = torch.utils.data.DataLoader(tensors(xv, yv), batch_size=xv.shape[0], shuffle=False)
        stopper = EarlyStopping(monitor="val_loss", mode="min", patience=config.patience, min_delta=config.min_delta)
        trainer = lightning.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=config.max_epochs,
            callbacks=[stopper],
            enable_checkpointing=False,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            log_every_n_steps=1,
            default_root_dir=root,
        )
        trainer.fit(module, train_dataloaders=train_loader, val_dataloaders=val_loader)
    state = module.best_state if module.best_state is not None else module.net.state_dict()
    return MLPModel(
        config=config,
        mean=mean,
        scale=scale,
        feature_names=names,
        state={k: v.detach().cpu().numpy().astype(np.float32).copy() for k, v in state.items()},
        seed=seed,
        best_epoch=module.best_epoch,
        val_losses=tuple(module.val_losses),
    )
