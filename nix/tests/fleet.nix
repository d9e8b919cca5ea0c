# A whole fleet in three VMs, deployed with the modules as an operator
# would: `nats` (nats-server with JetStream and the accounts built from
# the roster), `controller` (swarm-controller and the declarations) and
# `alpha` (the hive daemon, Docker, and an agent image built with
# dockerTools and loaded before the hive starts; no registry is involved).
#
# Passes when the controller sees alpha fresh and the declared agent runs:
# Docker shows the container running (the ground truth) and alpha's status
# entry in the KV bucket says so (the hive's claim, read with the nats CLI).
#
# The NATS seeds come from ./keys.nix and sit in /etc of the VMs, and so in
# the store: acceptable only because they are public test keys.
{ pkgs, modules }:
let
  keys = import ./keys.nix;

  testSecret = name: text: {
    "hyperhive-test/${name}" = {
      inherit text;
      mode = "0400";
    };
  };

  agentImage = pkgs.dockerTools.buildImage {
    name = "hhtest/hello";
    tag = "1";
    copyToRoot = pkgs.buildEnv {
      name = "hhtest-hello-root";
      paths = [ pkgs.busybox ];
      pathsToLink = [ "/bin" ];
    };
    config.Cmd = [
      "/bin/sleep"
      "3600"
    ];
  };

  # What every host of the fleet shares: the roster and the controller's
  # public keys.
  fleet = {
    imports = [ modules.swarm ];
    services.hyperhive.swarm = {
      hives.alpha = {
        labels.zone = "test";
        inherit (keys.alpha) nkey;
      };
      controller = {
        inherit (keys.controller) nkey xkey;
      };
    };
  };
in
{
  name = "hyperhive-fleet";

  nodes = {
    nats = {
      imports = [ fleet ];
      services.hyperhive.swarm.nats = {
        enable = true;
        openFirewall = true;
      };
    };

    controller =
      { pkgs, ... }:
      {
        imports = [ fleet ];
        environment.etc =
          testSecret "controller.nk" keys.controller.nkeySeed
          // testSecret "controller.xk" keys.controller.xkeySeed;
        environment.systemPackages = [
          pkgs.jq
          pkgs.natscli
        ];
        services.hyperhive.swarm = {
          controller = {
            enable = true;
            nats = {
              url = "nats://nats:4222";
              credentialsFile = "/etc/hyperhive-test/controller.nk";
            };
            xkeySeedFile = "/etc/hyperhive-test/controller.xk";
          };
          declarations.alpha.hello = {
            image = "hhtest/hello:1";
            command = [
              "/bin/sleep"
              "3600"
            ];
            power = "up";
            memory_mb = 32;
          };
        };
      };

    alpha =
      { config, pkgs, ... }:
      {
        imports = [ fleet ];
        environment.systemPackages = [ pkgs.curl ];
        virtualisation.memorySize = 2048;
        virtualisation.diskSize = 4096;
        environment.etc = testSecret "alpha.nk" keys.alpha.nkeySeed;
        services.hyperhive = {
          enable = true;
          hiveName = "alpha";
          nats = {
            url = "nats://nats:4222";
            credentialsFile = "/etc/hyperhive-test/alpha.nk";
          };
        };
        # The agent's image is local before the hive starts.
        systemd.services.hyperhive-test-image = {
          description = "load the test agent image into dockerd";
          wantedBy = [ "hyperhive-hive.service" ];
          before = [ "hyperhive-hive.service" ];
          requires = [ "docker.service" ];
          after = [ "docker.service" ];
          serviceConfig = {
            Type = "oneshot";
            RemainAfterExit = true;
            ExecStart = "${config.virtualisation.docker.package}/bin/docker load --input ${agentImage}";
          };
        };
      };
  };

  testScript = ''
    start_all()

    nats.wait_for_unit("nats.service")
    nats.wait_for_open_port(4222)

    # Type=notify: active means the hive said READY=1, once its socket and
    # health port listened.
    alpha.wait_for_unit("hyperhive-test-image.service")
    alpha.wait_for_unit("hyperhive-hive.service")
    alpha.succeed("curl --fail --silent http://127.0.0.1:7390/health/live")
    # The operator API is the socket (group hyperhive); TCP takes no writes.
    alpha.succeed("test \"$(stat -c '%a %G' /run/hyperhive/hive.sock)\" = '660 hyperhive'")
    alpha.succeed("hive --api /run/hyperhive/hive.sock agents")
    alpha.fail("curl --fail --silent -X POST -H 'Content-Type: text/plain' --data '{}' http://127.0.0.1:7390/api/v1/agents/x/stop")

    controller.wait_for_unit("hyperhive-swarm.service")
    controller.wait_for_unit("hyperhive-swarm-declare.service")

    # Fresh: the controller reads alpha's status entry and finds it young enough.
    controller.wait_until_succeeds(
        "swarm-controller --config /etc/hyperhive/swarm-controller.toml status --json"
        " | jq -e '.hives[] | select(.name == \"alpha\") | .freshness == \"fresh\"'",
        timeout=180,
    )

    # The declared agent runs. Docker is the ground truth...
    alpha.wait_until_succeeds(
        "docker ps --filter label=org.hyperhive.hive=alpha --filter label=org.hyperhive.agent=hello"
        " --filter status=running --format '{{.Names}}' | grep -q .",
        timeout=300,
    )
    # ...and the hive's status entry, as an operator reads it, agrees.
    controller.wait_until_succeeds(
        "nats --server nats://nats:4222 --nkey /etc/hyperhive-test/controller.nk"
        " kv get hyperhive-status alpha --raw"
        " | jq -e '.agents.hello.observed == \"running\"'",
        timeout=180,
    )
  '';
}
