"""The build's work records and atomic writes: what makes a rerun safe after any stop."""

from __future__ import annotations

import errno

import pytest

from animegamer.data.errors import DataError
from animegamer.data.store import append_record, read_records, write_atomic


def test_a_torn_last_record_is_cut_off_and_appending_goes_on(tmp_path):
    log = tmp_path / "clips.jsonl"
    append_record(log, {"shot_id": "a"})
    with log.open("ab") as file:
        file.write(b'{"shot_id": "b", "sta')
    assert read_records(log) == [{"shot_id": "a"}]
    append_record(log, {"shot_id": "c"})
    assert read_records(log) == [{"shot_id": "a"}, {"shot_id": "c"}]


def test_a_damaged_record_is_an_error_naming_the_line(tmp_path):
    log = tmp_path / "clips.jsonl"
    log.write_text('{"shot_id": "a"}\n[1]\n{"shot_id": "b"}\n')
    with pytest.raises(DataError, match=r"clips\.jsonl, line 2: not a record"):
        read_records(log)


def test_a_failed_write_leaves_no_partial_file_and_says_the_disk_is_full(tmp_path):
    target = tmp_path / "clips" / "a.mp4"

    def full_disk(partial):
        partial.write_bytes(b"half a clip")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DataError, match=r"no space left on device writing .*a\.mp4") as raised:
        write_atomic(target, full_disk)
    assert "rerun the same command" in str(raised.value)
    assert list(target.parent.iterdir()) == []


def test_other_write_errors_name_the_file(tmp_path):
    def refused(partial):
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(DataError, match=r"could not write .*b\.json: .*Permission denied"):
        write_atomic(tmp_path / "b.json", refused)
