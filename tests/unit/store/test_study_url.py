"""Where a study lives, from a URL or from an Optuna storage object (the Python API takes both): the one place
that knows the default file, reads a storage object's URL, and knows the file behind a URL and the lock files
beside it (tune's run lock, the claims' lock and delete all read them here)."""
import optuna
import pytest
from optuna.storages.journal import JournalFileBackend

from tuner.errors import UserError
from tuner.store.storage import StorageURL, study_url, url_of


def test_no_storage_is_the_study_file_under_studies():
    assert study_url("bert") == "sqlite:///studies/bert.db"
    assert study_url("bert", "") == "sqlite:///studies/bert.db"


def test_a_url_is_kept_as_given():
    assert study_url("bert", "postgresql+psycopg://u:p@h:5432/db") == "postgresql+psycopg://u:p@h:5432/db"


def test_an_rdb_storage_object_is_named_by_its_url_without_sqlites_query(tmp_path):
    plain = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/a.db")
    assert study_url("bert", plain) == f"sqlite:///{tmp_path}/a.db"
    assert study_url("bert", plain).path == f"{tmp_path}/a.db"  # a StorageURL, as a URL given is
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


def test_a_study_without_a_storage_lives_in_its_own_file_under_studies():
    url = study_url("bert-int8")
    assert isinstance(url, StorageURL) and url == "sqlite:///studies/bert-int8.db"
    assert url.path == "studies/bert-int8.db"
    assert (url.run_lock("bert-int8"), url.claim_lock("bert-int8")) == (
        "studies/bert-int8.db.bert-int8.lock", "studies/bert-int8.db.bert-int8.claim.lock")


def test_a_journal_is_a_file_and_a_server_or_a_proxy_is_none():
    journal = study_url("s", "journal:////tmp/x/studies.log")
    assert (journal.path, journal.is_journal, journal.is_proxy) == ("/tmp/x/studies.log", True, False)
    server = study_url("s", "postgresql+psycopg://u:p@db:5432/t")
    assert (server.path, server.run_lock("s"), server.claim_lock("s"), server.is_proxy) == (None, None, None, False)
    proxy = study_url("s", "grpc://proxy-host:13000")
    assert (proxy.path, proxy.is_proxy, proxy.is_journal) == (None, True, False)
