// liqo-stack from TypeScript (docs/package.md): the program's own kubernetes providers, the two foreign
// clusters peered through them, a namespace offloaded, and a Deployment whose pods run in the foreign
// clusters. The `liqo-stack` SDK is generated from the package's schema (sdks/liqo-stack).
import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";
import * as liqo from "liqo-stack";

interface ClusterAccess {
    kubeconfig: string; // a kubeconfig file
    server: string; // its API server, where the runtime reaches it
}

const config = new pulumi.Config();
const clusters = config.requireObject<Record<string, ClusterAccess>>("clusters"); // by cluster id
const namespace = config.get("namespace") ?? "apps";
const foreignIds = Object.keys(clusters).filter((id) => id !== "home");

// As the stack's own providers: the cluster id as clusterIdentifier (a new kubeconfig never replaces
// an object), server-side apply, Secrets and ConfigMaps updated in place.
const providers: Record<string, k8s.Provider> = {};
for (const [id, access] of Object.entries(clusters)) {
    providers[id] = new k8s.Provider(id, {
        kubeconfig: access.kubeconfig,
        clusterIdentifier: id,
        enableServerSideApply: true,
        enableSecretMutable: true,
        enableConfigMapMutable: true,
    });
}

const stack = new liqo.Stack("liqo", {
    home: { clusterId: "home" },
    foreignClusters: foreignIds.map((id) => ({ clusterId: id, apiServerAddress: clusters[id].server })),
    namespaces: [{ name: namespace, podOffloadingStrategy: liqo.PodOffloadingStrategy.Remote }],
    virtualKubelet: { homeApiServerAddress: clusters["home"].server },
    runtime: { mode: liqo.RuntimeMode.External, webhookPort: config.requireNumber("webhookPort") },
    providers,
});

const labels = { app: "web" };
new k8s.apps.v1.Deployment(
    "web",
    {
        metadata: { name: "web", namespace },
        spec: {
            replicas: config.getNumber("replicas") ?? 2,
            selector: { matchLabels: labels },
            template: {
                metadata: { labels },
                spec: { containers: [{ name: "web", image: "registry.example/web:1.0" }] },
            },
        },
    },
    { provider: providers["home"], dependsOn: [stack] }, // the namespace is offloaded first
);

export const virtualNodes = stack.foreignClusters;
