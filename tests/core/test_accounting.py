"""Row accounting: read = kept + dropped by reason + quarantined by reason, or an error."""

import pytest

from airflow_curation.core.accounting import AccountingError, RowAccounting


def test_books_close_and_round_trip():
    a = RowAccounting()
    a.keep(5)
    a.drop("too_short")
    a.drop("too_short", 2)
    a.quarantine("invalid_json")
    assert a.read == 9 and a.closes
    d = a.to_dict()
    assert d == {"read": 9, "kept": 5, "dropped": {"too_short": 3}, "quarantined": {"invalid_json": 1}}
    assert RowAccounting.from_dict(d).to_dict() == d
    a.check("unit x")


def test_merge_adds_reasons():
    a, b = RowAccounting(), RowAccounting()
    a.keep(2)
    a.drop("dup")
    b.keep(1)
    b.drop("dup", 4)
    b.quarantine("invalid_utf8", 2)
    a.merge(b)
    assert a.to_dict() == {"read": 10, "kept": 3, "dropped": {"dup": 5}, "quarantined": {"invalid_utf8": 2}}
    assert a.closes


def test_books_that_do_not_close_raise():
    a = RowAccounting(read=10, kept=9)
    assert not a.closes
    with pytest.raises(AccountingError, match="unit part-00003"):
        a.check("unit part-00003")
    # Invented rows are as wrong as lost ones.
    b = RowAccounting(read=1, kept=2)
    with pytest.raises(AccountingError):
        b.check()


def test_dict_reasons_are_sorted_for_stable_json():
    a = RowAccounting()
    a.drop("z")
    a.drop("a")
    a.drop("m")
    assert list(a.to_dict()["dropped"]) == ["a", "m", "z"]


def test_notes_stand_beside_the_books():
    a, b = RowAccounting(), RowAccounting()
    a.keep(2)
    a.note("empty_file")
    b.note("empty_file")
    b.note("not_a_regular_file")
    assert a.merge(b).closes and a.read == 2
    d = a.to_dict()
    assert d["notes"] == {"empty_file": 2, "not_a_regular_file": 1}
    assert RowAccounting.from_dict(d).to_dict() == d
    # Records of stages that never note look as they always did.
    assert "notes" not in RowAccounting(read=1, kept=1).to_dict()
