from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LifecycleState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIFECYCLE_STATE_UNSPECIFIED: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_LOADING: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_WARMING: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_STANDBY: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_ACTIVE: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_DRAINING: _ClassVar[LifecycleState]
    LIFECYCLE_STATE_STOPPED: _ClassVar[LifecycleState]
LIFECYCLE_STATE_UNSPECIFIED: LifecycleState
LIFECYCLE_STATE_LOADING: LifecycleState
LIFECYCLE_STATE_WARMING: LifecycleState
LIFECYCLE_STATE_STANDBY: LifecycleState
LIFECYCLE_STATE_ACTIVE: LifecycleState
LIFECYCLE_STATE_DRAINING: LifecycleState
LIFECYCLE_STATE_STOPPED: LifecycleState

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DemoteRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchCacheRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "model", "engine", "state", "num_running", "num_waiting", "kv_cache_usage", "block_size", "num_gpu_blocks", "max_num_seqs", "max_model_len", "in_flight", "zone", "region", "tokenizer", "openai_port", "cached_blocks", "sessions", "waiting_by_priority")
    class WaitingByPriorityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NUM_RUNNING_FIELD_NUMBER: _ClassVar[int]
    NUM_WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_GPU_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    OPENAI_PORT_FIELD_NUMBER: _ClassVar[int]
    CACHED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_BY_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    model: str
    engine: str
    state: LifecycleState
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    block_size: int
    num_gpu_blocks: int
    max_num_seqs: int
    max_model_len: int
    in_flight: int
    zone: str
    region: str
    tokenizer: str
    openai_port: int
    cached_blocks: int
    sessions: int
    waiting_by_priority: _containers.ScalarMap[int, int]
    def __init__(self, worker_id: _Optional[str] = ..., model: _Optional[str] = ..., engine: _Optional[str] = ..., state: _Optional[_Union[LifecycleState, str]] = ..., num_running: _Optional[int] = ..., num_waiting: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., block_size: _Optional[int] = ..., num_gpu_blocks: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., max_model_len: _Optional[int] = ..., in_flight: _Optional[int] = ..., zone: _Optional[str] = ..., region: _Optional[str] = ..., tokenizer: _Optional[str] = ..., openai_port: _Optional[int] = ..., cached_blocks: _Optional[int] = ..., sessions: _Optional[int] = ..., waiting_by_priority: _Optional[_Mapping[int, int]] = ...) -> None: ...

class CacheEvent(_message.Message):
    __slots__ = ("seq", "stored", "removed", "cleared", "snapshot")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    stored: BlocksStored
    removed: BlocksRemoved
    cleared: AllBlocksCleared
    snapshot: bool
    def __init__(self, seq: _Optional[int] = ..., stored: _Optional[_Union[BlocksStored, _Mapping]] = ..., removed: _Optional[_Union[BlocksRemoved, _Mapping]] = ..., cleared: _Optional[_Union[AllBlocksCleared, _Mapping]] = ..., snapshot: _Optional[bool] = ...) -> None: ...

class BlocksStored(_message.Message):
    __slots__ = ("block_hashes",)
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class BlocksRemoved(_message.Message):
    __slots__ = ("block_hashes",)
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class AllBlocksCleared(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
