"""A local fake of Modal's control-plane gRPC API, enough for the real `modal` SDK (1.6.x) to run
`App.lookup`, `Sandbox.create` (V1 backend: MODAL_SANDBOX_V2=0), `Sandbox.list(tags=)`,
`Sandbox.from_id` and `terminate` over real gRPC (grpclib, plaintext, MODAL_SERVER_URL).

Every other RPC answers UNIMPLEMENTED: exec and filesystem calls go through a separate task
command router service that this fake does not serve. Faults: `fail(method, grpc_status, times)`.
"""
from __future__ import annotations

import asyncio
import secrets
import string
import threading
import time
import uuid

from grpclib import GRPCError, Status
from grpclib.server import Server
from modal_proto import api_grpc, api_pb2


def _unimplemented(name: str):
    async def handler(self, stream) -> None:
        raise GRPCError(Status.UNIMPLEMENTED, f"the fake does not serve {name}")
    handler.__name__ = name
    return handler


class _Base(api_grpc.ModalClientBase):
    pass


for _name in list(getattr(api_grpc.ModalClientBase, "__abstractmethods__", ())):
    setattr(_Base, _name, _unimplemented(_name))
_Base.__abstractmethods__ = frozenset()


class FakeModalService(_Base):
    def __init__(self, fake: FakeModal) -> None:
        self.fake = fake

    async def _begin(self, name: str, stream):
        f = self.fake
        with f.lock:
            f.calls.append(name)
            fault = f.faults.get(name)
            if fault and fault[1] > 0:
                f.faults[name] = (fault[0], fault[1] - 1)
                raise GRPCError(fault[0], f"fake fault on {name}")
        md = dict(stream.metadata or {})
        if md.get("x-modal-token-secret") and md.get("x-modal-token-secret") != f.token_secret:
            raise GRPCError(Status.UNAUTHENTICATED, "invalid token")
        return await stream.recv_message()

    async def ClientHello(self, stream) -> None:
        await self._begin("ClientHello", stream)
        await stream.send_message(api_pb2.ClientHelloResponse(image_builder_version="2025.06"))

    async def EnvironmentGetOrCreate(self, stream) -> None:
        await self._begin("EnvironmentGetOrCreate", stream)
        await stream.send_message(api_pb2.EnvironmentGetOrCreateResponse(
            environment_id="en-fake", metadata=api_pb2.EnvironmentMetadata(
                name="main", settings=api_pb2.EnvironmentSettings(image_builder_version="2025.06"))))

    async def AppGetOrCreate(self, stream) -> None:
        req = await self._begin("AppGetOrCreate", stream)
        with self.fake.lock:
            app_id = self.fake.apps.setdefault(req.app_name, "ap-" + uuid.uuid4().hex[:12])
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def ImageGetOrCreate(self, stream) -> None:
        req = await self._begin("ImageGetOrCreate", stream)
        with self.fake.lock:
            self.fake.images.append(list(req.image.dockerfile_commands))
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(
            image_id="im-" + uuid.uuid4().hex[:12],
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)))

    async def SandboxCreate(self, stream) -> None:
        req = await self._begin("SandboxCreate", stream)
        d = req.definition
        with self.fake.lock:
            if d.name and any(s["name"] == d.name and s["app_id"] == req.app_id for s in self.fake.sandboxes.values()):
                raise GRPCError(Status.ALREADY_EXISTS, f"sandbox {d.name} already exists")
            sid = _v1_id()
            self.fake.sandboxes[sid] = {"id": sid, "app_id": req.app_id, "name": d.name,
                                        "tags": {t.tag_name: t.tag_value for t in req.tags}, "timeout": d.timeout_secs, "idle_timeout": d.idle_timeout_secs,
                                        "definition": d, "created_at": time.time()}
        await stream.send_message(api_pb2.SandboxCreateResponse(sandbox_id=sid))

    async def SandboxGetTaskId(self, stream) -> None:
        req = await self._begin("SandboxGetTaskId", stream)
        await stream.send_message(api_pb2.SandboxGetTaskIdResponse(task_id="ta-" + req.sandbox_id[3:]))

    async def SandboxTagsSet(self, stream) -> None:
        req = await self._begin("SandboxTagsSet", stream)
        with self.fake.lock:
            if req.sandbox_id in self.fake.sandboxes:
                self.fake.sandboxes[req.sandbox_id]["tags"] = {t.tag_name: t.tag_value for t in req.tags}
        await stream.send_message(api_pb2.google_dot_protobuf_dot_empty__pb2.Empty()
                                  if hasattr(api_pb2, "google_dot_protobuf_dot_empty__pb2") else _empty())

    async def _tags_get(self, name: str, stream) -> None:
        req = await self._begin(name, stream)
        with self.fake.lock:
            s = self.fake.sandboxes.get(req.sandbox_id)
        if s is None:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {req.sandbox_id} not found")
        await stream.send_message(api_pb2.SandboxTagsGetResponse(
            tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in s["tags"].items()]))

    async def SandboxTagsGet(self, stream) -> None:
        await self._tags_get("SandboxTagsGet", stream)

    async def SandboxTagsGetV2(self, stream) -> None:
        await self._tags_get("SandboxTagsGetV2", stream)

    async def SandboxGetFromName(self, stream) -> None:
        req = await self._begin("SandboxGetFromName", stream)
        with self.fake.lock:
            app_id = self.fake.apps.get(req.app_name)
            match = [s for s in self.fake.sandboxes.values() if s["app_id"] == app_id and s["name"] == req.sandbox_name]
        if not match:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {req.sandbox_name} not found")
        await stream.send_message(api_pb2.SandboxGetFromNameResponse(sandbox_id=match[0]["id"]))

    async def SandboxWait(self, stream) -> None:
        req = await self._begin("SandboxWait", stream)
        with self.fake.lock:
            known = req.sandbox_id in self.fake.sandboxes
        if not known:
            raise GRPCError(Status.NOT_FOUND, f"sandbox {req.sandbox_id} not found")
        await stream.send_message(api_pb2.SandboxWaitResponse())      # no result yet: still running

    async def SandboxList(self, stream) -> None:
        req = await self._begin("SandboxList", stream)
        want = {t.tag_name: t.tag_value for t in req.tags}
        with self.fake.lock:
            items = [s for s in self.fake.sandboxes.values()
                     if (not req.app_id or s["app_id"] == req.app_id)
                     and all(s["tags"].get(k) == v for k, v in want.items())
                     and (not req.before_timestamp or s["created_at"] < req.before_timestamp)]
        infos = [api_pb2.SandboxInfo(id=s["id"], app_id=s["app_id"], name=s["name"], created_at=s["created_at"],
                                     tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in s["tags"].items()])
                 for s in sorted(items, key=lambda s: -s["created_at"])]
        await stream.send_message(api_pb2.SandboxListResponse(sandboxes=infos))

    async def SandboxTerminate(self, stream) -> None:
        req = await self._begin("SandboxTerminate", stream)
        with self.fake.lock:
            self.fake.sandboxes.pop(req.sandbox_id, None)
            self.fake.terminated.append(req.sandbox_id)
        await stream.send_message(api_pb2.SandboxTerminateResponse())


def _v1_id() -> str:
    """A V1-shaped sandbox id ("sb-" + 22 alphanumerics): the SDK picks its backend from the id's shape."""
    alphabet = string.ascii_letters + string.digits
    return "sb-" + "".join(secrets.choice(alphabet) for _ in range(22))


def _empty():
    from google.protobuf import empty_pb2
    return empty_pb2.Empty()


class FakeModal:
    def __init__(self, token_secret: str = "fake-modal-secret") -> None:  # noqa: S107 (a fake's token)
        self.token_secret = token_secret
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.faults: dict[str, tuple[Status, int]] = {}
        self.apps: dict[str, str] = {}
        self.images: list[list[str]] = []
        self.sandboxes: dict[str, dict] = {}
        self.terminated: list[str] = []
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = Server([FakeModalService(self)])
        self.loop.run_until_complete(self.server.start("127.0.0.1", 0))
        self.port = self.server._server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    def start(self) -> FakeModal:
        self.thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        def _close() -> None:
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(_close)
        self.thread.join(5)

    def add_foreign(self, app_name: str, name: str, tags: dict[str, str]) -> str:
        """A sandbox someone else created in that app (by hand, another campaign)."""
        with self.lock:
            app_id = self.apps.setdefault(app_name, "ap-" + uuid.uuid4().hex[:12])
            sid = _v1_id()
            self.sandboxes[sid] = {"id": sid, "app_id": app_id, "name": name, "tags": dict(tags), "timeout": 0,
                                   "idle_timeout": 0, "definition": None, "created_at": time.time()}
        return sid

    def live_ids(self) -> set[str]:
        with self.lock:
            return set(self.sandboxes)

    def fail(self, method: str, status: Status, times: int = 1) -> None:
        with self.lock:
            self.faults[method] = (status, times)
