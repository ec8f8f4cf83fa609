# corpus: mirrors NVIDIA/pyxis README.md ("srun": a command inside a container image)
# job: grep
# expect: image=docker.io/library/almalinux:9 state=Succeeded exit=0 out~PRETTY_NAME="AlmaLinux
srun --container-image=almalinux:9 grep PRETTY /etc/os-release
