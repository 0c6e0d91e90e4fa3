"""The recipe the recorder sees (capture/recipe.py): the optimizer's class and settings, the dtypes, the mesh,
checkpointed modules and compile state, written in the footer's `recipe` and stored among the receipt's features,
where `compare` names each fact that changed as recipe drift."""

from __future__ import annotations

import pytest

from cli_helpers import cli_json
from receipts.capture import Recorder

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow   # importing torch takes seconds


def _log(path, optimizer_name: str, *, checkpointed: bool = False) -> None:
    torch.manual_seed(0)
    blocks = [torch.nn.Linear(8, 8) for _ in range(2)]
    if checkpointed:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        blocks = [checkpoint_wrapper(b) for b in blocks]
    model = torch.nn.Sequential(*blocks)
    opt = (torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1) if optimizer_name == "adamw"
           else torch.optim.SGD(model.parameters(), lr=3e-4, momentum=0.9))
    rec = Recorder(str(path), use_cuda=False, rank=0, world_size=1,
                   header_facts={"run_name": path.stem, "identity": {"host_lineage": "cpu", "preset": "p",
                                                                     "regime": "fsdp2/no-compile"}})
    rec.watch_memory(opt, model)
    x = torch.randn(4, 8)
    for n in range(30):
        with rec.step(n) as s:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            s.loss = float(loss.detach())
    rec.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    db = str(root / "r.duckdb")
    for name, opt, ckpt in (("adamw_run", "adamw", False), ("sgd_run", "sgd", False), ("adamw_ckpt", "adamw", True)):
        _log(root / f"{name}.log", opt, checkpointed=ckpt)
        code, out = cli_json(db, "ingest", str(root / f"{name}.log"))
        assert code == 0, out
    return db


def test_the_footer_recipe_becomes_features(store):
    features = cli_json(store, "show", "adamw_run")[1]["features"]
    assert features["optimizer.class"] == "AdamW"
    assert features["optimizer.lr"] == 3e-4 and features["optimizer.weight_decay"] == 0.1
    assert features["optimizer.betas"] == "0.9,0.999"
    assert features["dtype.param"] == "float32" and features["compile"] == "none"
    assert features["checkpoint.modules"] == 0


def test_adamw_to_sgd_is_recipe_drift_named_field_by_field(store):
    code, out = cli_json(store, "compare", "adamw_run", "sgd_run")
    assert code == 0
    fields = {d["field"]: (d["a"], d["b"]) for d in out["differences"]} | {
        d["field"]: (d["a"], d["b"]) for d in (out.get("drift") or {}).get("recipe", [])}
    assert fields["features.optimizer.class"] == ("AdamW", "SGD")
    # a setting only SGD has is no fact about AdamW: the class change carries it (an unknown is not drift)
    assert "features.optimizer.momentum" not in fields
    ckpt = cli_json(store, "compare", "adamw_run", "adamw_ckpt")[1]
    fields = {d["field"]: (d["a"], d["b"]) for d in ckpt["differences"]} | {
        d["field"]: (d["a"], d["b"]) for d in (ckpt.get("drift") or {}).get("recipe", [])}
    assert fields["features.checkpoint.modules"] == (0, 2)
    assert fields["features.checkpoint.classes"] == ("none", "Linear")


def test_checkpointed_modules_are_found_under_fully_shards_class_names():
    """fully_shard turns a CheckpointWrapper into an instance of `FSDPCheckpointWrapper`, a subclass made for it:
    the recorder finds it by the class names along the MRO, as it finds torch.compile's OptimizedModule."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper, checkpoint_wrapper

    from receipts.capture.recipe import model_facts

    blocks = [checkpoint_wrapper(torch.nn.Linear(4, 4)) for _ in range(3)]
    for b in blocks:   # what fully_shard does to each module's class
        b.__class__ = type("FSDPCheckpointWrapper", (type(b),), {})
    facts = model_facts(torch.nn.Sequential(*blocks))
    assert isinstance(blocks[0], CheckpointWrapper)
    assert (facts["checkpoint.modules"], facts["checkpoint.classes"]) == (3, "Linear")
