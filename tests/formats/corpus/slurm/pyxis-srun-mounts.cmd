# corpus: mirrors NVIDIA/pyxis README.md ("srun": a file from the host mounted into the container)
# job: grep-host
# expect: image=docker.io/library/almalinux:9 state=Succeeded exit=0 out~PRETTY_NAME="corpus host"
echo 'PRETTY_NAME="corpus host"' > os-release
srun -J grep-host --container-image=almalinux:9 --container-mounts=$PWD/os-release:/host/os-release grep PRETTY /host/os-release
