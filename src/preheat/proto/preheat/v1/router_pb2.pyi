from preheat.proto.preheat.v1 import inference_pb2 as _inference_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PickRequest(_message.Message):
    __slots__ = ("request", "client_region", "client_zone")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REGION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ZONE_FIELD_NUMBER: _ClassVar[int]
    request: _inference_pb2.GenerateRequest
    client_region: str
    client_zone: str
    def __init__(self, request: _Optional[_Union[_inference_pb2.GenerateRequest, _Mapping]] = ..., client_region: _Optional[str] = ..., client_zone: _Optional[str] = ...) -> None: ...

class PickedEndpoint(_message.Message):
    __slots__ = ("worker_id", "address", "zone", "region", "predicted_ttft_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    address: str
    zone: str
    region: str
    predicted_ttft_ms: float
    def __init__(self, worker_id: _Optional[str] = ..., address: _Optional[str] = ..., zone: _Optional[str] = ..., region: _Optional[str] = ..., predicted_ttft_ms: _Optional[float] = ...) -> None: ...

class PickResponse(_message.Message):
    __slots__ = ("endpoint", "reason", "explanation", "cached_blocks", "alternates")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATES_FIELD_NUMBER: _ClassVar[int]
    endpoint: PickedEndpoint
    reason: str
    explanation: str
    cached_blocks: int
    alternates: _containers.RepeatedCompositeFieldContainer[PickedEndpoint]
    def __init__(self, endpoint: _Optional[_Union[PickedEndpoint, _Mapping]] = ..., reason: _Optional[str] = ..., explanation: _Optional[str] = ..., cached_blocks: _Optional[int] = ..., alternates: _Optional[_Iterable[_Union[PickedEndpoint, _Mapping]]] = ...) -> None: ...

class PickBatchRequest(_message.Message):
    __slots__ = ("picks",)
    PICKS_FIELD_NUMBER: _ClassVar[int]
    picks: _containers.RepeatedCompositeFieldContainer[PickRequest]
    def __init__(self, picks: _Optional[_Iterable[_Union[PickRequest, _Mapping]]] = ...) -> None: ...

class PickError(_message.Message):
    __slots__ = ("code", "message", "retry_after_s")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retry_after_s: float
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retry_after_s: _Optional[float] = ...) -> None: ...

class PickResult(_message.Message):
    __slots__ = ("picked", "error")
    PICKED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    picked: PickResponse
    error: PickError
    def __init__(self, picked: _Optional[_Union[PickResponse, _Mapping]] = ..., error: _Optional[_Union[PickError, _Mapping]] = ...) -> None: ...

class PickBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[PickResult]
    def __init__(self, results: _Optional[_Iterable[_Union[PickResult, _Mapping]]] = ...) -> None: ...

class PickStreamRequest(_message.Message):
    __slots__ = ("id", "pick", "timeout_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    PICK_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    pick: PickRequest
    timeout_ms: int
    def __init__(self, id: _Optional[int] = ..., pick: _Optional[_Union[PickRequest, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class PickStreamResponse(_message.Message):
    __slots__ = ("id", "result")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    id: int
    result: PickResult
    def __init__(self, id: _Optional[int] = ..., result: _Optional[_Union[PickResult, _Mapping]] = ...) -> None: ...
