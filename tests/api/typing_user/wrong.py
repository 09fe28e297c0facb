"""A mistake the check must report (so a passing run means something)."""

from typing import assert_type

import shaledb

with shaledb.Db.open("memory://typing") as db:
    assert_type(db.get(b"k"), bytes)  # wrong on purpose: the key may be absent
