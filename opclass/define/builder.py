"""How a class statement becomes a frozen :class:`~opclass.define.spec.OpSpec`: collect, then
validate, then the spec. Nothing here touches the dispatcher's registrations: everything that
can be wrong with a definition is found before anything is registered, so a bad class leaves
the dispatcher (and any earlier op of the same name) as it was.

Example:
    >>> import torch
    >>> from opclass.define.builder import OpBuilder
    >>> class Scale:  # what CustomOp.__init_subclass__ hands over
    ...     @staticmethod
    ...     def cpu(x: torch.Tensor, k: float = 2.0) -> torch.Tensor: ...
    >>> builder = OpBuilder(Scale, {"name": "docs_builder::scale"})
    >>> _ = builder.collect()
    >>> builder.validate().schema_str
    '(Tensor x, float k=2.0) -> Tensor'
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from typing import Any, Callable, Iterable, Mapping, NoReturn, Sequence

import torch

from opclass.core import memo
from opclass.core.compat import config_stand_in, tagged_inplace, tagged_out
from opclass.core.names import CLASS_KEYWORDS
from opclass.core.types import DEVICE_TYPES, MISTAKEN_DEVICES
from opclass.define import conventions, schema as schemas
from opclass.define.annotations import SchemaProblem, config_name, configs_of
from opclass.define.arguments import Arguments
from opclass.define.hookspec import ADDED_BY, MEMBER_OF, OPTIONAL, Hook, HookContext, hooks, kernels_of, member_hook, parameters_of
from opclass.define.spec import Keywords, OpSpec
from opclass.errors import OpDefinitionError, definition_error, did_you_mean, formatdef, user_stacklevel

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_NAMESPACES = {"aten", "prim", "prims", "quantized", "_quantized", "inductor", "higher_order", "_c10d_functional", "c10d"}
_STUB = "__opclass_stub__"


def _snake_case(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


# Keywords that belong to the op's definition, which an op extended with existing=True already has.
_DEFINING_KEYWORDS = ("mutates_args", "schema", "tags", "pt2_compliant", "out", "inplace")
_KEYWORD_ALIASES = {"extend": "existing", "extends": "existing", "exists": "existing", "mutates": "mutates_args", "mutable_args": "mutates_args", "mutated_args": "mutates_args", "tag": "tags", "ns": "namespace", "op_name": "name"}


class OpBuilder:
    """Turns one class statement into an :class:`OpSpec`: :meth:`collect`, then :meth:`validate`.
    One small method per check; the state they share is declared here."""

    __slots__ = ("cls", "outside", "cls_name", "given", "unknown", "hooks", "defined", "inherited_schema", "keywords", "schema_text", "schema", "partial", "configs", "kernels", "forms")

    def __init__(self, cls: type, keywords: Mapping[str, Any], unknown: Mapping[str, Any] = {}, outside: Callable[[str], bool] = lambda qualname: False) -> None:
        self.cls = cls
        #: Is a name an op defined outside opclass? (The install layer knows which ops are opclass's.)
        self.outside = outside
        # Local classes read as ``Bad``, not ``test_x.<locals>.Bad``.
        self.cls_name = cls.__qualname__.rpartition("<locals>.")[2]
        self.given = dict(keywords)
        self.unknown = dict(unknown)
        # The registry, read once: every check, and the install, use these hooks.
        self.hooks: Mapping[str, Hook] = hooks()
        #: Hook name -> the user's value (static methods unwrapped), inherited ones included.
        self.defined: dict[str, Any] = {}
        #: The schema of the concrete op this class derives from, if any.
        self.inherited_schema: str | None = None
        #: The class keywords in force (inherited ones included), as given.
        self.keywords: dict[str, Any] = {}
        #: The schema text the spec gets, and the parsed schema (set when the schema is settled).
        self.schema_text = ""
        self.schema: Any = None
        #: Kernel hooks annotated only in part (checked against the schema, not derived from).
        self.partial: list[str] = []
        #: Set by :meth:`gather_members`: every kernel the class defines, and the annotated kernels' configs.
        self.kernels: dict[str, Any] = {}
        self.configs: dict[str, type] = {}
        #: Per calling convention of the class (``"out"``, ``"inplace"``): its schema text and parse.
        self.forms: dict[str, tuple[str, torch._C.FunctionSchema]] = {}

    def fail(self, hook: str | None, problem: str, fix: str = "", fn: Any = None) -> NoReturn:
        if (by := getattr(fn, ADDED_BY, None)) is not None:  # the class's author does not own it
            problem += f" (it was added to the op from outside the class, by opclass.add_provider in {by})"
            fix = f"opclass.remove_provider({self.cls_name}, {hook!r}) first, or have {by} add it again with the op's new parameters"
        raise definition_error(self.cls_name, hook, fn, problem, fix)

    # ------------------------------------------------------------------ 1. collect

    def collect(self) -> dict[str, Any]:
        """Find the hooks this class defines or inherits; returns the class keywords in force,
        which subclasses inherit."""
        for klass in reversed(self.cls.__mro__):
            for attr, raw in vars(klass).items():
                fn = _unwrap(raw)
                if attr in self.hooks and not getattr(fn, _STUB, False):
                    self.defined[attr] = fn
                elif hasattr(fn, MEMBER_OF) and (owner := member_hook(self.hooks, fn)) is not None:
                    self.defined.setdefault(owner, {})[attr] = fn
        # A variant of a concrete op keeps its signature unless it annotates its own kernels.
        base = next((k.__dict__["_opclass_record"] for k in self.cls.__mro__[1:] if k.__dict__.get("_opclass_record")), None)
        self.inherited_schema = base.schema_str if base is not None else None
        inherited: dict[str, Any] = getattr(self.cls, "_opclass_keywords", {})
        # Any iterable is taken once (a generator would be empty for the next reader and for subclasses).
        given = {k: tuple(v) if k in ("mutates_args", "tags", "inplace") and isinstance(v, Iterable) and not isinstance(v, str) else v for k, v in self.given.items()}
        self.keywords = {**{k: v for k, v in inherited.items() if k not in ("name", "existing")}, **{k: v for k, v in given.items() if v is not None}}
        if base is not None:
            self.keywords.setdefault("namespace", base.namespace)
        return self.keywords

    # ------------------------------------------------------------------ 2. validate

    def validate_attributes(self) -> None:
        """Hooks written as static methods; no near-miss hook names among the helpers."""
        for attr, raw in vars(self.cls).items():
            fn = _unwrap(raw)
            if (member := getattr(fn, MEMBER_OF, None)) is not None and attr in self.hooks and not self.hooks[attr].backend:
                self.fail(attr, f"marked a member of the {member!r} hook, but {attr} is a hook of its own and no backend kernel: the mark would be ignored", "drop the decorator, or give the function another name", fn)
            if attr.startswith("__") or attr.startswith("_opclass") or member is not None:
                continue
            if (hook := self.hooks.get(attr)) is not None:
                if hook.staticmethod and not isinstance(raw, staticmethod):
                    kind = "a classmethod" if isinstance(raw, classmethod) else "a plain function" if inspect.isfunction(raw) else type(raw).__name__
                    params = parameters_of(fn) if hook.kernel else None
                    receiver = params[0].name if params else None
                    fix = f"add @staticmethod above the def and drop {receiver!r} (the op's arguments only)" if receiver in ("self", "cls", "ctx") else "add @staticmethod above the def"
                    self.fail(attr, f"hooks are static methods, but this is {kind}", fix, fn)
                if hook.staticmethod and not callable(fn):
                    self.fail(attr, f"must be a function, got {fn!r}", "define it with @staticmethod def ...")
                continue
            if attr.startswith("_") or not (inspect.isfunction(fn) or isinstance(raw, (staticmethod, classmethod))):
                continue
            if (device := MISTAKEN_DEVICES.get(attr.lower())) is not None:
                self.fail(attr, f"unknown device type {attr!r}", f"the torch device type is '{device}': rename the method {device}", fn)
            if attr in DEVICE_TYPES:
                fix = f"register one with opclass.register_hook(opclass.device_hook({attr!r})), or use default"
                self.fail(attr, f"{attr!r} is a torch device type with no opclass hook", fix, fn)
            guess = did_you_mean(attr, self.hooks, {alias: name for name, hook in self.hooks.items() for alias in hook.aliases})
            if guess is not None:
                # A helper that merely contains a hook name (backward_impl) gets told how to keep it.
                hint = f" (for a helper, name it _{attr})" if guess in attr and guess != attr else ""
                self.fail(attr, "not a hook", f"did you mean '{guess}'?{hint}", fn)

    def validate_keywords(self) -> Keywords:
        """Name, namespace, mutates_args, schema and tags: types and spelling."""
        kw = self.keywords
        for key, value in self.unknown.items():
            guess = did_you_mean(key, CLASS_KEYWORDS, _KEYWORD_ALIASES)
            fix = f"did you mean {guess!r}?" if guess else f"the class keywords are {', '.join(CLASS_KEYWORDS)}"
            self.fail(None, f"unknown class keyword {key}={value!r}", fix)
        namespace = kw.get("namespace")
        if namespace is not None and (not isinstance(namespace, str) or not _IDENT.match(namespace)):
            self.fail(None, f"namespace={namespace!r} is not a valid namespace", "use a Python identifier such as 'mylib'")
        mutates = kw.get("mutates_args", ())
        # torch's spelling for "may write to any Tensor argument"
        unknown = isinstance(mutates, str) and mutates == "unknown"
        mutates = () if unknown else mutates
        if isinstance(mutates, str):
            self.fail(None, f"mutates_args={mutates!r} is a string, not a collection of names", f"write mutates_args=({mutates!r},), or mutates_args='unknown' for every Tensor argument")
        if not isinstance(mutates, Iterable) or not all(isinstance(m, str) for m in mutates):
            self.fail(None, f"mutates_args={mutates!r} must be parameter names", "write e.g. mutates_args=('out',)")
        tags = kw.get("tags", ())
        tags = (tags,) if isinstance(tags, torch.Tag) else tuple(tags) if isinstance(tags, Iterable) else tags
        if not isinstance(tags, tuple) or not all(isinstance(t, torch.Tag) for t in tags):
            self.fail(None, f"tags={kw.get('tags')!r} must be torch.Tag values", "write e.g. tags=torch.Tag.needs_fixed_stride_order")
        if tagged_inplace(tags) and tagged_out(tags):
            self.fail(None, "torch.Tag.inplace and torch.Tag.out are mutually exclusive", "pick one")
        pt2_compliant = kw.get("pt2_compliant", True)
        if type(pt2_compliant) is not bool:
            self.fail(None, f"pt2_compliant={pt2_compliant!r} must be True or False", "write pt2_compliant=False for an op tagged exactly as tags= says")
        if not pt2_compliant and torch.Tag.pt2_compliant_tag in tags:
            self.fail(None, "pt2_compliant=False with torch.Tag.pt2_compliant_tag in tags=", "drop one of the two")
        schema, name = kw.get("schema"), self.given.get("name")
        for key, value, example in (("schema", schema, "(Tensor x) -> Tensor"), ("name", name, "mylib::my_op")):
            if value is not None and not isinstance(value, str):
                self.fail(None, f"{key}={value!r} must be a string", f"write e.g. {key}='{example}'")
        out, inplace = kw.get("out", False), kw.get("inplace", ())
        if type(out) is not bool:
            self.fail(None, f"out={out!r} must be True or False", "write out=True for an .out overload (keyword-only out Tensors, one per output)")
        inplace = (inplace,) if isinstance(inplace, str) else inplace
        if not isinstance(inplace, Iterable) or not all(isinstance(n, str) for n in inplace):
            self.fail(None, f"inplace={kw.get('inplace')!r} must be argument names", "write e.g. inplace=('x',): the Tensor arguments the in-place overload writes its outputs into")
        existing = self.given.get("existing")
        if existing is not None and type(existing) is not bool:
            self.fail(None, f"existing={existing!r} must be True or False", "write existing=True to extend an op defined elsewhere")
        if existing:
            for key in _DEFINING_KEYWORDS:
                if self.given.get(key) is not None:
                    problem = f"{key}= with existing=True: the op is defined already, with its own schema, mutations and tags"
                    self.fail(None, problem, f"drop {key}=; the dispatcher's schema is used (annotations, if any, must agree with it)")
        return Keywords(name, namespace, tuple(dict.fromkeys(mutates)), schema, tags, unknown, bool(existing), "mutates_args" in kw, pt2_compliant, out, tuple(inplace))

    def validate_pairs(self) -> None:
        """Hooks that only make sense together (``setup_context`` + ``backward``)."""
        for attr in self.defined:
            for needed in self.hooks[attr].requires:
                if needed not in self.defined:
                    self.fail(attr, f"is defined without {needed!r}", f"define both {attr} and {needed}, or neither", self.defined[attr])

    def gather_members(self, qualname: str) -> None:
        """Members given from outside the class (``Hook.extra``), now that the op's name is known;
        then ``kernels`` and ``configs``."""
        for hook in self.hooks.values():
            for name, fn in (hook.extra(qualname) if hook.members and hook.extra is not None else {}).items():
                if name in self.defined.get(hook.name, {}) or name in self.hooks:
                    if getattr(fn, OPTIONAL, False):
                        self.leave_out(hook.name, name, fn, f"{qualname} already has a {hook.name} member or hook named {name!r}")
                        continue
                    self.fail(name, f"{qualname} already has a {hook.name} member or hook named {name!r}", f"give the one added from outside another name", fn)
                self.defined.setdefault(hook.name, {})[name] = fn
        self.kernels = kernels_of(self.hooks, self.defined)
        self.configs = configs_of([fn for hook, fn in self.defined.items() if self.hooks[hook].kernel])

    def resolve_name(self, kw: Keywords) -> tuple[str, str, str]:
        """``(namespace, name, overload)`` from ``name=``/``namespace=``/the class name."""
        raw = kw.name if kw.name is not None else _snake_case(self.cls.__name__)
        namespace, _, rest = raw.partition("::") if "::" in raw else (kw.namespace or "", "", raw)
        if not namespace and "::" not in raw:
            self.fail(None, f"op name {raw!r} has no namespace", f"write name='mylib::{raw}' or subclass a base with namespace='mylib'")
        opname, _, overload = rest.partition(".")
        for part, what in ((namespace, "namespace"), (opname, "op name"), (overload or "default", "overload name")):
            if not _IDENT.match(part):
                self.fail(None, f"{what} {part!r} in {raw!r} is not a valid identifier", "use letters, digits and underscores, e.g. 'mylib::my_op'")
        if namespace in _RESERVED_NAMESPACES:
            self.fail(None, f"namespace {namespace!r} belongs to PyTorch", "use your project's name as the namespace")
        return namespace, opname, "" if overload == "default" else overload

    def existing_schema(self, kw: Keywords, qualname: str) -> tuple[torch._C.FunctionSchema, Keywords]:
        """``existing=True``: the dispatcher's schema (the annotated hooks must agree with it), and
        the keywords with the op's own tags."""
        schema = schemas.find_schema(qualname)
        if schema is None:
            self.fail(None, f"existing=True, but {qualname} is not defined", "define the op first (TORCH_LIBRARY, Library.define, or load its library), or drop existing=True")
        self.schema_text = schemas.schema_text(schema)
        op_tags, mutated = schemas.op_tags(qualname), tuple(a.name for a in Arguments.of(schema).written)
        derived = self.derived(qualname, mutated, op_tags, True)
        self.agree(schema, derived, f"the existing op {qualname}{self.schema_text}", "annotate it as the op's schema says, or not at all")
        return schema, dataclasses.replace(kw, tags=op_tags)

    def derived(self, qualname: str, mutates: Sequence[str] | None, tags: tuple[torch.Tag, ...], elsewhere: bool) -> list[tuple[str, str, torch._C.FunctionSchema]]:
        """``(hook, schema text, parsed)`` for each kernel hook whose annotations give a schema
        (``mutates``: the mutated parameters; ``None``: every Tensor one, ``mutates_args="unknown"``).

        A hook annotated in part (``def abstract(x, shape) -> Tensor``) needs the schema from
        elsewhere (another kernel, ``schema=``, the base class: ``elsewhere``, or the existing op);
        it goes to ``partial``, whose annotations :meth:`validate_kernels` checks."""
        # A kernel of another style has the parameters of its overload, not the op's.
        annotated, complete = schemas.annotated_kernels({h: fn for h, fn in self.kernels.items() if conventions.style_of(fn) == "functional"})
        self.partial = [h for h in annotated if h not in complete] if complete or elsewhere else []
        found: list[tuple[str, str, torch._C.FunctionSchema]] = []
        for hook, fn in [(h, self.kernels[h]) for h in annotated if h not in self.partial]:
            try:
                text = schemas.derive(fn, schemas.tensor_parameters(fn) if mutates is None else mutates, tags)
            except SchemaProblem as e:
                self.fail(hook, e.problem, e.fix, fn)
            # Kernels annotated alike (cpu and abstract, typically) give the same text: parsed once.
            same = next((parsed for _, t, parsed in found if t == text), None)
            found.append((hook, text, same if same is not None else self._parse(qualname, text, hook)))
        return found

    def derive_schema(self, kw: Keywords, qualname: str) -> torch._C.FunctionSchema:
        """The op schema from ``schema=`` and/or the annotated kernels, which must all agree."""
        derived = self.derived(qualname, None if kw.mutates_unknown else kw.mutates_args, kw.tags, bool(kw.schema or self.inherited_schema))
        if others := [d for d in derived[1:] if d[2] is not derived[0][2]]:  # kernels annotated alike share one parse
            first_hook, _, first = derived[0]
            against = formatdef(self.cls_name, first_hook, self.kernels[first_hook])
            self.agree(first, others, against, "give every annotated kernel the same signature, or annotate only one")
        if kw.schema is not None:
            explicit = self._parse(qualname, kw.schema, None)
            if (tag_problem := schemas.tag_problem(explicit, kw.tags)) is not None:
                self.fail(None, f"schema={kw.schema!r}: {tag_problem[0]}", tag_problem[1])
            # The derived schemas agree with each other: the first stands for them all.
            self.agree(explicit, derived[:1], f"schema={kw.schema!r}", "make the annotations match the schema, or drop them")
            in_schema = {a.name for a in Arguments.of(explicit).written}
            if kw.mutates_given and not kw.mutates_unknown and set(kw.mutates_args) != in_schema:
                problem = f"schema={kw.schema!r} mutates {sorted(in_schema)} but mutates_args={tuple(sorted(set(kw.mutates_args)))}"
                self.fail(None, problem, "mark exactly the mutated arguments with (a!) in the schema and list them in mutates_args")
            self.schema_text = kw.schema.strip()
            return explicit
        if not derived and self.inherited_schema is not None:
            self.schema_text = self.inherited_schema
            return self._parse(qualname, self.inherited_schema, None)
        if not derived:
            hook, fn = next((h, fn) for h, fn in self.kernels.items() if h not in self.hooks or self.hooks[h].backend)
            if (style := conventions.style_of(fn)) != "functional":
                self.fail(hook, f"is written {style}-style, whose parameters are not the op's, and no kernel's annotations or schema= give the op's schema", "define abstract, annotated with the op's parameters and outputs (it allocates the outputs too)", fn)
            self.fail(hook, "has no type annotations and the class gives no schema=", "annotate the kernel (x: Tensor) -> Tensor, or pass schema='(Tensor x) -> Tensor'", fn)
        self.schema_text = derived[0][1]
        return derived[0][2]

    def agree(self, reference: torch._C.FunctionSchema, derived: Sequence[tuple[str, str, torch._C.FunctionSchema]], against: str, fix: str) -> None:
        """Each derived schema must be ``reference``, which ``against`` names; the first that is not fails."""
        for hook, _, parsed in derived:
            if (diff := schemas.describe_difference(reference, parsed)) is not None:
                self.fail(hook, f"disagrees with {against} ({diff})", fix, self.kernels[hook])

    def _parse(self, qualname: str, text: str, hook: str | None) -> torch._C.FunctionSchema:
        # Config classes are registered with torch at install: parsed here as a registered stand-in.
        for cls in self.configs.values():
            text = re.sub(rf"(?<![\w.]){re.escape(config_name(cls))}(?![\w.])", config_stand_in(), text)
        try:
            return schemas.parse(qualname, text)
        except RuntimeError as e:
            detail = str(e).strip().splitlines()[0]
            self.fail(hook, f"schema {text!r} does not parse ({detail})", "see the schema table in the docs", self.kernels.get(hook or ""))

    def validate_kernels(self, table: Arguments, kw: Keywords) -> None:
        """Unannotated kernels must accept the op's arguments; mutates_args must name parameters."""
        names = table.names
        for m in kw.mutates_args:
            if m not in names:
                guess = did_you_mean(m, names)
                self.fail(None, f"mutates_args names {m!r}, which is not a parameter ({', '.join(names)})", f"did you mean {guess!r}?" if guess else "list parameter names only")
        for hook, fn in self.defined.items():
            leading = self.hooks[hook].arguments_from
            if leading is not None and (problem := schemas.missing_default(fn, table, leading)) is not None:
                self.fail(hook, problem, f"write {hook}{table.parameters(list(memo.signature(fn).parameters)[:leading])}", fn)
        for hook, fn in self.kernels.items():
            if (form := conventions.style_of(fn)) != "functional":
                styled = Arguments.of(self.forms[form][1], self.configs)
                if (problem := schemas.kernel_signature_problem(fn, styled)) is not None:
                    self.fail(hook, f"written {form}-style, {problem}", f"write {hook}{styled.parameters()}", fn)
                continue
            if (not schemas.annotated(fn) or hook in self.partial) and (problem := schemas.kernel_signature_problem(fn, table)) is not None:
                self.fail(hook, problem, f"write {hook}{table.parameters()}{schemas.positional_only_fix(fn, table)}", fn)
            if hook in self.partial and (problem := schemas.annotation_problem(fn, self.schema)) is not None:
                self.fail(hook, problem, "annotate it as the op's schema says, or not at all", fn)
        if self.schema._is_view_op():
            self.fail(None, f"schema {str(self.schema)!r} declares a view (an alias annotation without '!')", "return fresh Tensors (e.g. x.clone()) with a plain schema")
        if not any(a.holds_tensor for a in table):
            device_kernels = [h for h in self.defined if self.hooks[h].backend and self.hooks[h].device_type]
            if device_kernels and not any(a.is_device for a in table):
                self.fail(device_kernels[0], "an op with no Tensor inputs cannot pick a device kernel", "add a device: torch.device parameter, or define default", self.defined[device_kernels[0]])

    def validate_hooks(self, qualname: str, table: Arguments, signature: inspect.Signature, kw: Keywords) -> None:
        """Each hook's own check (built-in or third-party), with the schema known."""
        for hook, value in list(self.defined.items()):
            if (check := self.hooks[hook].check) is None:
                continue
            # Members that must not fail the class are checked one by one, after the others.
            optional = {}
            for name, fn in list(value.items()) if self.hooks[hook].members else ():
                if getattr(fn, OPTIONAL, False):
                    optional[name] = value.pop(name)
            if value or not optional:
                check(value, HookContext(self.cls_name, hook, value, qualname, self.schema, signature, dict(self.defined), kw.tags, table, self.hooks, kw.existing))
            for name, fn in optional.items():
                with_it = {**value, name: fn}
                try:
                    check(with_it, HookContext(self.cls_name, hook, with_it, qualname, self.schema, signature, dict(self.defined), kw.tags, table, self.hooks, kw.existing))
                    value[name] = fn
                except OpDefinitionError as e:
                    self.leave_out(hook, name, fn, str(e))

    def leave_out(self, hook: str, name: str, fn: Any, problem: str) -> None:
        """A member given from outside that must not fail the class (``OPTIONAL``) and does not fit it: left out, with a warning."""
        by = getattr(fn, ADDED_BY, "another module")
        warnings.warn(f"class {self.cls_name}: the {hook} member {name!r} that {by} added from outside the class is left out: {problem}", UserWarning, stacklevel=user_stacklevel())

    def validate_conventions(self, kw: Keywords, qualname: str) -> None:
        """``out=``, ``inplace=`` and each kernel's style fit the op; the overloads' schemas (``forms``)."""
        styles = {h: conventions.style_of(fn) for h, fn in self.kernels.items()}
        if (found := conventions.problem(self.schema, kw.out, kw.inplace, list(styles.values()))) is not None:
            styled = next((h for h, st in styles.items() if st != "functional"), None)
            self.fail(None if kw.out or kw.inplace or styled is None else styled, *found, self.kernels.get(styled or ""))
        for kind in [k for k, on in (("out", kw.out), ("inplace", kw.inplace)) if on and k in vars(self.cls) and not getattr(vars(self.cls)[k], conventions.DERIVED, False)]:
            self.fail(None, f"{kind}= gives the class an attribute {kind} (the class calling that overload), and the class body defines one", f"rename the class attribute {kind}")
        if kw.out or kw.inplace or set(styles.values()) - {"functional"}:
            for kind, (name, text) in conventions.forms(qualname, self.schema, self.schema_text, kw.inplace).items():
                self.forms[kind] = (text, self._parse(name, text, None))
        if kw.out and (defaulted := conventions.inductor_trap(self.schema)):
            warnings.warn(
                f"class {self.cls_name}: with out=True, torch's Inductor (2.13 to 2.15) compiles {qualname} to its .out overload and passes "
                f"an argument at its default value twice, so the compiled code fails when it runs ({', '.join(map(repr, defaulted))}). "
                "Give those parameters no default (callers pass them), or leave out=True off until torch fixes it",
                UserWarning, stacklevel=user_stacklevel(),
            )

    # ------------------------------------------------------------------ 3. build

    def build(self, kw: Keywords, qualname: str, ns: str, name: str, overload: str, table: Arguments) -> OpSpec:
        return OpSpec(
            qualname=qualname,
            namespace=ns,
            name=name,
            overload=overload,
            schema_str=self.schema_text,
            schema=self.schema,
            arguments=table,
            signature=schemas.python_signature(table, self.schema),
            tags=kw.tags,
            # custom_op's default, which pt2_compliant=False opts out of (Library.define's tags=).
            defined_tags=kw.tags if kw.existing or not kw.pt2_compliant or torch.Tag.pt2_compliant_tag in kw.tags else (*kw.tags, torch.Tag.pt2_compliant_tag),
            hooks=dict(self.defined),
            registry=tuple(self.hooks.values()),
            cls_name=self.cls_name,
            existing=kw.existing,
            is_inplace=tagged_inplace(kw.tags),
            is_out=tagged_out(kw.tags),
        )

    def validate(self) -> OpSpec | None:
        """Every check, in order; the spec, or ``None`` for an abstract base (no kernel, no
        ``existing=True``), which defines no op. Raises :class:`OpDefinitionError` on the first problem."""
        self.validate_attributes()
        kw = self.validate_keywords()
        self.validate_pairs()
        if not kw.existing and not any(self.hooks[h].backend for h in self.defined):  # an abstract base
            named = self.given.get("name")
            if isinstance(named, str) and "::" in named and self.defined and self.outside(named):
                hooks = ", ".join(f"{self.cls_name}.{h}" for h in self.defined)
                first = next(iter(self.defined))
                problem = f"{named} is an op defined outside opclass, and the class defines no kernel (cpu, cuda or default) to be an op of its own"
                self.fail(first, problem, f"write existing=True in the class statement to add {hooks} to that op", self.defined[first])
            return None
        ns, name, overload = self.resolve_name(kw)
        qualname = f"{ns}::{name}" + (f".{overload}" if overload else "")
        self.gather_members(qualname)
        if kw.existing:
            self.schema, kw = self.existing_schema(kw, qualname)
        else:
            self.schema = self.derive_schema(kw, qualname)
        table = Arguments.of(self.schema, self.configs)
        self.validate_conventions(kw, qualname)
        self.validate_kernels(table, kw)
        spec = self.build(kw, qualname, ns, name, overload, table)
        self.validate_hooks(qualname, table, spec.signature, kw)
        carried = {h: v for h, v in spec.hooks.items() if self.hooks[h].conventions}
        return conventions.with_siblings(spec, kw.out, kw.inplace, {k: (*f, Arguments.of(f[1], self.configs)) for k, f in self.forms.items()}, carried)


def _unwrap(raw: Any) -> Any:
    # Twice where @staticmethod sits above a decorator that returns one (@opclass.provider).
    while isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    return raw
