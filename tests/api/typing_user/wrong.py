"""Mistakes the check must report (so a passing run means something): each line marked
``# error: CODE`` must give exactly that error, and no other line any."""

from typing import assert_type

import shaledb
from shaledb.store.metrics import PrometheusCollector

with shaledb.Db.open("memory://typing") as db:
    assert_type(db.get(b"k"), bytes)  # error: assert-type (the key may be absent)
    PrometheusCollector("memory://typing")  # error: arg-type (a handle, not its URL)
