// placeholder: vfio-user codec
