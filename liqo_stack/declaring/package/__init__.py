"""liqo-stack as a Pulumi package, for programs in every Pulumi language (docs/package.md).

`schema`: the package schema, generated from the stack config's models; `provider`: the component
provider the engine runs (`package/`, the directory `pulumi package add` is given).
"""
