module k8s.io/kubernetes

go 1.19
