"""Where a study lives, from a URL or from an Optuna storage object (the Python API takes both): the one place
that knows the default file and reads a storage object's URL."""
import optuna
import pytest
from optuna.storages.journal import JournalFileBackend

from tuner.errors import UserError
from tuner.store.storage import study_url, url_of


def test_no_storage_is_the_study_file_under_studies():
    assert study_url("bert") == "sqlite:///studies/bert.db"
    assert study_url("bert", "") == "sqlite:///studies/bert.db"


def test_a_url_is_kept_as_given():
    assert study_url("bert", "postgresql+psycopg://u:p@h:5432/db") == "postgresql+psycopg://u:p@h:5432/db"


def test_an_rdb_storage_object_is_named_by_its_url_without_sqlites_query(tmp_path):
    plain = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/a.db")
    assert study_url("bert", plain) == f"sqlite:///{tmp_path}/a.db"
    with_query = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/b.db?timeout=30")
    assert url_of(with_query) == f"sqlite:///{tmp_path}/b.db"


def test_a_storage_under_optunas_cache_is_named_by_the_storage_inside(tmp_path):
    cached = optuna.storages.get_storage(f"sqlite:///{tmp_path}/c.db")
    assert not isinstance(cached, optuna.storages.RDBStorage)  # Optuna's _CachedStorage around it
    assert url_of(cached) == f"sqlite:///{tmp_path}/c.db"


def test_a_journal_storage_on_a_file_is_named_by_the_journal_url(tmp_path):
    journal = optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "j.log")))
    assert study_url("bert", journal) == f"journal:///{tmp_path}/j.log"


@pytest.mark.parametrize("storage", [optuna.storages.InMemoryStorage(), optuna.storages.RDBStorage("sqlite:///:memory:")],
                         ids=["in-memory", "sqlite-in-memory"])
def test_a_storage_no_url_names_is_refused_in_one_line(storage):
    with pytest.raises(UserError) as err:
        study_url("bert", storage)
    assert str(err.value).startswith(f"storage={type(storage).__name__}: engine-tuner's workers and trial children "
                                     "reopen a study by its URL, and this storage has none")
    assert "\n" not in str(err.value)


def test_something_else_is_refused_naming_what_to_give():
    with pytest.raises(UserError, match=r"^storage=42: give a URL \(sqlite:///FILE.db"):
        study_url("bert", 42)
