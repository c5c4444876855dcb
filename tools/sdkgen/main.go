// Command pulumi-sdkgen writes the SDK of a Pulumi package for one language with Pulumi's own code
// generators: what a language host's GeneratePackage runs for `pulumi package add` and
// `pulumi package gen-sdk`. The Node.js language host this machine can build (pulumi sdk v3.68.0,
// tools/toolchain.toml) predates that call, so the CLI cannot generate a TypeScript SDK through it
// (docs/package.md); this runs the same generator, at the pinned CLI's version, without the host.
//
//	pulumi-sdkgen --schema package/schema.json --dependency kubernetes.json --language nodejs --out sdks/liqo-stack
//
// --dependency: the schema of a package the schema refers to (`pulumi package get-schema kubernetes@4.25.0`).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/pkg/v3/codegen/nodejs"
	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
)

// dependencies serves the packages a schema refers to, read from files: no plugin is started.
type dependencies map[string]*schema.Package

func (d dependencies) LoadPackage(name string, version *semver.Version) (*schema.Package, error) {
	return d.LoadPackageV2(context.Background(), &schema.PackageDescriptor{Name: name, Version: version})
}

func (d dependencies) LoadPackageV2(_ context.Context, descriptor *schema.PackageDescriptor) (*schema.Package, error) {
	pkg, ok := d[descriptor.Name]
	if !ok {
		return nil, fmt.Errorf("package %s is referred to but not given: pass its schema with --dependency", descriptor.Name)
	}
	return pkg, nil
}

func (d dependencies) LoadPackageReference(name string, version *semver.Version) (schema.PackageReference, error) {
	return d.LoadPackageReferenceV2(context.Background(), &schema.PackageDescriptor{Name: name, Version: version})
}

func (d dependencies) LoadPackageReferenceV2(
	ctx context.Context, descriptor *schema.PackageDescriptor,
) (schema.PackageReference, error) {
	pkg, err := d.LoadPackageV2(ctx, descriptor)
	if err != nil {
		return nil, err
	}
	return pkg.Reference(), nil
}

func bind(path string, loader schema.Loader) (*schema.Package, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec schema.PackageSpec
	if err := json.Unmarshal(text, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pkg, diags, err := schema.BindSpec(spec, loader, schema.ValidationOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %s", path, diags.Error())
	}
	return pkg, nil
}

type repeated []string

func (r *repeated) String() string     { return fmt.Sprint(*r) }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func run() error {
	var given repeated
	schemaPath := flag.String("schema", "", "the package's schema (JSON)")
	language := flag.String("language", "nodejs", "the SDK's language (nodejs)")
	out := flag.String("out", "", "the directory the SDK is written to")
	flag.Var(&given, "dependency", "the schema of a package the schema refers to (repeated)")
	flag.Parse()
	if *schemaPath == "" || *out == "" {
		return fmt.Errorf("--schema and --out are required")
	}
	if *language != "nodejs" {
		return fmt.Errorf("--language %s: only nodejs is generated here (the other hosts generate their own)", *language)
	}
	loader := dependencies{}
	for _, path := range given {
		pkg, err := bind(path, loader)
		if err != nil {
			return err
		}
		loader[pkg.Name] = pkg
	}
	pkg, err := bind(*schemaPath, loader)
	if err != nil {
		return err
	}
	pkg.SupportPack = true // as `pulumi package add` generates a local package
	files, err := nodejs.GeneratePackage("pulumi-sdkgen", pkg, nil, nil, true, loader)
	if err != nil {
		return err
	}
	for name, content := range files {
		path := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote the %s SDK of %s to %s (%d files)\n", *language, pkg.Name, *out, len(files))
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-sdkgen: %v\n", err)
		os.Exit(1)
	}
}
