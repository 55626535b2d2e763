// placeholder: vfio-user codec tests
