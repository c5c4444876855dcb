// An application team's stack (docs/package.md): it offloads its own namespace and runs its Deployment
// there, with nothing but its provider of the home cluster. A cluster selector that names a cluster the
// platform does not peer fails the preview (offeredClusters, from the platform stack's outputs).
import * as pulumi from "@pulumi/pulumi";
import * as k8s from "@pulumi/kubernetes";
import * as liqo from "liqo-stack";

const config = new pulumi.Config();
const platform = new pulumi.StackReference(config.require("platformStack"));
const namespace = config.get("namespace") ?? "apps";
const cluster = config.get("cluster") ?? "foreign-1";

const home = new k8s.Provider("home", {
    kubeconfig: config.require("homeKubeconfig"), // the team's own credentials
    enableServerSideApply: true,
});
const apps = new liqo.OffloadedNamespace("apps", {
    name: namespace,
    homeClusterId: platform.requireOutput("homeClusterId").apply((id) => String(id)),
    offeredClusters: platform.requireOutput("foreignClusters").apply((offered) => offered as Record<string, liqo.types.input.OfferedClusterArgs>),
    clusterSelector: [`liqo.io/remote-cluster-id=${cluster}`],
    podOffloadingStrategy: liqo.PodOffloadingStrategy.Remote,
    providers: { home },
});
new k8s.apps.v1.Deployment(
    "web",
    {
        metadata: { name: "web", namespace },
        spec: {
            replicas: config.getNumber("replicas") ?? 2,
            selector: { matchLabels: { app: "web" } },
            template: {
                metadata: { labels: { app: "web" } },
                spec: { containers: [{ name: "web", image: "registry.example/web:1.0" }] },
            },
        },
    },
    { provider: home, dependsOn: [apps] }, // the namespace is offloaded first
);
export const plan = apps.plan;
