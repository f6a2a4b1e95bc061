from switchyard.schemas import ErrorCode, ErrorInfo, http_status
from switchyard.schemas.export import main, rendered


def test_json_schema_export_is_fresh() -> None:
    assert main(["--check"]) == 0, "run `python -m switchyard.schemas.export` and commit switchyard/schemas/json"


def test_export_covers_every_model() -> None:
    names = rendered().keys()
    assert {"Work.json", "ChatEvent.json", "StageRecord.json", "RawChunk.json"} <= set(names)


def test_error_shape_and_status() -> None:
    info = ErrorInfo.of(ErrorCode.rate_limited, "slow down")
    assert info.model_dump() == {"type": "rate_limit_error", "code": "rate_limited", "message": "slow down"}
    assert http_status(ErrorCode.deadline_exceeded) == 504
    assert http_status(ErrorCode.payload_too_large) == 413
