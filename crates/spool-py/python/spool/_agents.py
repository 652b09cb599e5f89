"""Agents and tools: the decorators, and JSON Schemas from type hints."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union, overload

F = TypeVar("F", bound=Callable[..., Any])


class Agent:
    """A Python agent: a generator function (or ``async def``) registered under ``name``.

    Its first parameter is the ``cx`` it makes requests with; the others are its input,
    given as keyword arguments from the task's input object. It stays callable as the
    function it wraps.
    """

    def __init__(self, name: str, func: Callable[..., Any], input_schema: Optional[Dict[str, Any]]):
        self.name = name
        self.func = func
        self.input_schema = input_schema
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self._convert = converters(func, skip=1)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<spool agent {self.name!r}>"

    def _invoke(self, cx: Any, **kwargs: Any) -> Any:
        for name, convert in self._convert.items():
            if name in kwargs:
                kwargs[name] = convert(kwargs[name])
        return self.func(cx, **kwargs)

    def _native(self) -> Tuple[str, Callable[..., Any], Optional[Dict[str, Any]]]:
        return (self.name, self._invoke if self._convert else self.func, self.input_schema)


class Tool:
    """A Python function served as the tool ``name``, its arguments checked against
    ``schema`` (made from its type hints) before it runs, on ``workers`` threads."""

    def __init__(self, name: str, func: Callable[..., Any], schema: Dict[str, Any], workers: int):
        self.name = name
        self.func = func
        self.schema = schema
        self.workers = workers
        self.__doc__ = func.__doc__
        self.__wrapped__ = func
        self._convert = converters(func, skip=0)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<spool tool {self.name!r}>"

    def definition(self) -> Dict[str, Any]:
        """The tool as an OpenAI-style function definition, to offer a model."""
        schema = {k: v for k, v in self.schema.items() if k != "description"}
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.schema.get("description", ""),
                "parameters": schema,
            },
        }

    def _call(self, args: Dict[str, Any]) -> Any:
        kwargs = dict(args)
        for name, convert in self._convert.items():
            if name in kwargs:
                kwargs[name] = convert(kwargs[name])
        return self.func(**kwargs)

    def _native(self) -> Tuple[str, Dict[str, Any], Callable[[Dict[str, Any]], Any], int]:
        return (self.name, self.schema, self._call, self.workers)


_AGENTS: Dict[str, Agent] = {}
_TOOLS: Dict[str, Tool] = {}


def registered_agents() -> List[Agent]:
    """Every agent defined with ``@spool.agent`` in this process, the latest of each name."""
    return list(_AGENTS.values())


def registered_tools() -> List[Tool]:
    """Every tool defined with ``@spool.tool`` in this process, the latest of each name."""
    return list(_TOOLS.values())


@overload
def agent(name: F) -> Agent: ...
@overload
def agent(name: Optional[str] = None, *, input_schema: Optional[Dict[str, Any]] = None) -> Callable[[F], Agent]: ...
def agent(name: Any = None, *, input_schema: Optional[Dict[str, Any]] = None) -> Any:
    """Registers a generator function (or ``async def``) as the agent ``name``.

    ``@spool.agent("research")`` or bare ``@spool.agent`` (named after the function).
    The input schema — what ``submit`` and the HTTP API check a task's input against —
    is made from the parameters' type hints unless ``input_schema`` gives it.
    """
    if callable(name):
        return agent()(name)

    def register(func: F) -> Agent:
        agent_name = name or func.__name__
        schema = input_schema if input_schema is not None else schema_of(func, skip=1)
        made = Agent(agent_name, func, schema)
        _AGENTS[agent_name] = made
        return made

    return register


@overload
def tool(name: F) -> Tool: ...
@overload
def tool(name: Optional[str] = None, *, schema: Optional[Dict[str, Any]] = None,
         description: Optional[str] = None, workers: int = 1) -> Callable[[F], Tool]: ...
def tool(name: Any = None, *, schema: Optional[Dict[str, Any]] = None,
         description: Optional[str] = None, workers: int = 1) -> Any:
    """Registers a function as the tool ``name`` (default: the function's name).

    Its arguments' JSON Schema comes from its type hints (``str``, ``int``, ``float``,
    ``bool``, ``list[X]``, ``dict[str, X]``, ``Optional[X]``, ``Literal[...]``, enums,
    dataclasses, ``TypedDict`` and pydantic models), its description from the
    docstring's first paragraph. A call whose arguments do not fit is answered with
    ``InvalidArguments`` and the function does not run. It runs on one of ``workers``
    executor threads, holding the GIL only while it runs; what it returns is the answer
    (JSON), and an exception it raises fails the request with its type and message.
    """
    if callable(name):
        return tool()(name)

    def register(func: F) -> Tool:
        tool_name = name or func.__name__
        made_schema = dict(schema) if schema is not None else schema_of(func, skip=0)
        text = description if description is not None else _summary(func)
        if text:
            made_schema["description"] = text
        made = Tool(tool_name, func, made_schema, workers)
        _TOOLS[tool_name] = made
        return made

    return register


def _summary(func: Callable[..., Any]) -> str:
    doc = inspect.getdoc(func) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()


def schema_of(func: Callable[..., Any], skip: int = 0) -> Dict[str, Any]:
    """The JSON Schema of ``func``'s keyword arguments (after the first ``skip``)."""
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=False)
    except Exception:  # noqa: BLE001 - unresolvable hints: fall back to none
        hints = {}
    properties: Dict[str, Any] = {}
    required: List[str] = []
    params = list(signature.parameters.values())[skip:]
    open_ended = False
    for param in params:
        if param.kind in (param.VAR_POSITIONAL,):
            continue
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        hint = hints.get(param.name, Any)
        properties[param.name] = type_schema(hint)
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif _jsonable(param.default):
            properties[param.name] = dict(properties[param.name], default=param.default)
    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    # A model's definitions ("$defs", which its "$ref"s point at from the root) go to
    # the root of this schema, where the pointers resolve.
    defs: Dict[str, Any] = {}
    for prop in properties.values():
        _hoist_defs(prop, defs)
    if defs:
        schema["$defs"] = defs
    if required:
        schema["required"] = required
    if not open_ended:
        schema["additionalProperties"] = False
    return schema


def _hoist_defs(schema: Any, defs: Dict[str, Any]) -> None:
    if isinstance(schema, dict):
        found = schema.pop("$defs", None)
        if isinstance(found, dict):
            for name, sub in found.items():
                defs.setdefault(name, sub)
                _hoist_defs(sub, defs)
        for value in schema.values():
            _hoist_defs(value, defs)
    elif isinstance(schema, list):
        for value in schema:
            _hoist_defs(value, defs)


def converters(func: Callable[..., Any], skip: int = 0) -> Dict[str, Callable[[Any], Any]]:
    """For each parameter whose hint is an enum, a dataclass or a pydantic model (or a
    list or Optional of one): the function that makes it from its JSON value."""
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable hints: no conversion
        return {}
    out: Dict[str, Callable[[Any], Any]] = {}
    for param in list(inspect.signature(func).parameters.values())[skip:]:
        convert = _converter(hints.get(param.name, Any))
        if convert is not None:
            out[param.name] = convert
    return out


def _converter(hint: Any) -> Optional[Callable[[Any], Any]]:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    validate = getattr(hint, "model_validate", None)
    if callable(validate):
        return validate  # type: ignore[no-any-return]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        cls = hint
        return lambda value: cls(**value) if isinstance(value, dict) else value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or (sys.version_info >= (3, 10) and _is_union_type(hint)):
        inner = [a for a in args if a is not _NONE]
        if len(inner) == 1:
            convert = _converter(inner[0])
            if convert is not None:
                c = convert
                return lambda value: None if value is None else c(value)
        return None
    if origin in (list, List) and args:
        convert = _converter(args[0])
        if convert is not None:
            c = convert
            return lambda value: [c(v) for v in value]
    return None


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


_NONE = type(None)


def type_schema(hint: Any) -> Dict[str, Any]:
    """The JSON Schema of one type hint; ``{}`` (anything) for what it cannot say."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint is _NONE or hint is None:
        return {"type": "null"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    model_schema = getattr(hint, "model_json_schema", None)
    if callable(model_schema):
        return dict(model_schema())
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return schema_of(hint, skip=0)
    if isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__") \
            and hasattr(hint, "__total__"):
        hints = typing.get_type_hints(hint)
        required = sorted(getattr(hint, "__required_keys__", hints.keys()))
        out: Dict[str, Any] = {"type": "object",
                               "properties": {k: type_schema(v) for k, v in hints.items()}}
        if required:
            out["required"] = list(required)
        return out
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is Union or (sys.version_info >= (3, 10) and _is_union_type(hint)):
        options = [type_schema(a) for a in args]
        return {"anyOf": options}
    if origin in (list, List, tuple, set, frozenset) or hint in (list, tuple, set):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [type_schema(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        item = type_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if origin in (dict, Dict) or hint is dict:
        value = type_schema(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
    return {}


def _is_union_type(hint: Any) -> bool:
    import types

    return isinstance(hint, getattr(types, "UnionType", ()))
