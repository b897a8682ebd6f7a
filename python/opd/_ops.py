"""opd._ops: the daemon's operators and a Client's methods for them.

DESIGN
Ops, held by its Client as `_ops`, owns the daemon's schema list
(`schemas`, from opd_ops_json with each op's origin from
opd_plugins_json, fetched once per Client) and the operator methods
(c.softmax, c.layernorm, ...) generated from it: Client.__getattr__
asks method() on first attribute access and stores the result in the
instance's __dict__, so from then on it is found directly. Each is a
plain function bound to the client that calls the Runner part's run()
(_runner.py) with no layer in between; its __name__ and __doc__
(signature, summary, shape rule, attributes) come from the schema.
"""
import types

from . import errors


class Ops:
    """A connection's view of the daemon's operators: schemas, methods."""

    def __init__(self, client):
        self._c = client
        self.schemas = None            # op name -> schema (fetched once)
        self.methods = {}              # op name -> generated bound method

    def all(self):
        """{name: schema} of every operator (fetched on first use)."""
        if self.schemas is None:
            c = self._c
            schemas = {o["name"]: o for o in
                       c._json(c._lib.opd_ops_json)["ops"]}
            origins = self.plugins().get("origins", {})
            for name, o in schemas.items():
                o["origin"] = origins.get(name, "built-in")
            self.schemas = schemas
        return self.schemas

    def schema(self, op):
        """The schema of `op`, or None."""
        if self.schemas is None:
            self.all()
        return self.schemas.get(op)

    def plugins(self):
        """See Client.plugins."""
        fn = getattr(self._c._lib, "opd_plugins_json", None)
        if fn is None:
            return {"plugins": [], "origins": {}}
        try:
            return self._c._json(fn)
        except errors.ProtocolError:      # a daemon older than PLUGINS
            return {"plugins": [], "origins": {}}

    def method(self, name):
        """The generated method of operator `name`, bound to the client
        (None when the daemon has no such operator)."""
        m = self.methods.get(name)
        if m is not None:
            return m
        schema = self.schema(name)
        if schema is None:
            return None
        m = types.MethodType(_make_method(schema), self._c)
        self.methods[name] = m
        return m


def _make_method(schema):
    op = schema["name"]

    def method(self, *inputs, out=None, device=None, **attrs):
        return self._runner.run(op, inputs, out, device, attrs)

    method.__name__ = op
    method.__doc__ = describe(schema, "out=None, device=None")
    return method


def describe(schema, tail):
    """The docstring of operator `schema`'s method: its signature (the
    inputs, the attributes with their defaults, then `tail`), summary,
    shape rule and attributes (also the graph builder's, opd._graph)."""
    ins = ", ".join(i["name"] + ("=None" if i["optional"] else "")
                    for i in schema["inputs"])
    at = ", ".join("%s=%r" % (a["name"], a["default"]) if not a["required"]
                   else a["name"] for a in schema["attrs"])
    return "%s(%s%s, %s)\n\n%s.\nshape: %s\n%s%s" % (
        schema["name"], ins, (", " + at) if at else "", tail, schema["summary"],
        schema["shape"],
        "".join("attr %s (%s): %s\n" % (a["name"], a["type"], a["doc"])
                for a in schema["attrs"]),
        "In-place allowed (out=x).\n" if schema["inplace"] else "")
