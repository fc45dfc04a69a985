"""The embedded local stack: real etcd, kube-apiservers, controller managers and Dex on loopback."""
