"""A store remembers the synthetic law its rows came from (``Manifest.synth``), and only
when every row did: ``lobsurf synth`` writes the record beside its files, ingest reads it."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest

from lobsurf.data.dataset import load_book_tensors
from lobsurf.data.store import MANIFEST, Store, StoreError
from lobsurf.data.store.generator import RECORD_NAME
from lobsurf.data.store.ingest import ingest
from lobsurf.data.synth import SynthConfig, synth_ingest_config, write_synth, write_synth_store

CFG = SynthConfig(snapshots_per_day=300, days=2, seed=5, edge=0.7, move_prob=0.2)


def test_synth_then_ingest_records_the_law(tmp_path):
    paths = write_synth(tmp_path / "dbn", CFG)
    store = ingest(paths, tmp_path / "store", synth_ingest_config(CFG))
    assert store.synth == asdict(CFG)
    assert Store.open(tmp_path / "store").manifest.synth == asdict(CFG)
    assert load_book_tensors(Store.open(tmp_path / "store")).synth == asdict(CFG)
    # one day of the two: still every row from the law
    assert ingest(paths[:1], tmp_path / "one", synth_ingest_config(CFG)).synth == asdict(CFG)
    assert write_synth_store(tmp_path / "direct", CFG).manifest.synth == asdict(CFG)


def test_files_not_all_from_one_law_record_none(tmp_path):
    paths = write_synth(tmp_path / "a", CFG)
    other = write_synth(tmp_path / "b", SynthConfig(snapshots_per_day=300, days=1, seed=6))
    shutil.copy(paths[0], tmp_path / paths[0].name)  # a file away from its record
    # a file changed after its record (another run's day under the same name)
    changed = write_synth(tmp_path / "c", CFG)
    shutil.copy(other[0], changed[0])
    cases = {"two laws": [paths[1], *other], "no record": [tmp_path / paths[0].name],
             "changed": changed}
    for name, inputs in cases.items():
        store = ingest(inputs, tmp_path / name.replace(" ", "_"), synth_ingest_config(CFG))
        assert store.synth is None, name
    (tmp_path / "a" / RECORD_NAME).write_text("{not json")
    assert ingest(paths, tmp_path / "broken", synth_ingest_config(CFG)).synth is None


def test_manifests_without_or_with_other_keys_load(tmp_path):
    write_synth_store(tmp_path / "s", CFG)
    manifest = tmp_path / "s" / MANIFEST
    raw = json.loads(manifest.read_text())
    raw.pop("synth")
    raw["a_later_key"] = {"anything": 1}
    manifest.write_text(json.dumps(raw))
    assert Store.open(tmp_path / "s").manifest.synth is None
    raw["synth"] = [1, 2]
    manifest.write_text(json.dumps(raw))
    with pytest.raises(StoreError, match="synth is not an object"):
        Store.open(tmp_path / "s")
