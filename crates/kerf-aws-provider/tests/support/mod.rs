//! moto's server on 127.0.0.1 (scripts/moto-server.py from the venv scripts/python-tools.sh
//! installs), one per test, stopped when dropped, and SDK clients pointed at it; the seed's
//! network and node class. kerf-operator's AWS end-to-end test includes this file too.

#![allow(dead_code)] // each test binary uses its own part of this module

mod port;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{Credentials, Region};
use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use kerf_api::EC2NodeClass;
use serde::Deserialize;

/// The region the tests play in (the seeds' region).
pub const REGION: &str = "ap-northeast-2";

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running moto server.
pub struct Moto {
    child: Child,
    port: u16,
    dir: TempDir,
    /// The tests' own credentials once IAM is enforced: an administrator's access key.
    admin: Option<Credentials>,
    /// The controller role's credentials once IAM is enforced.
    controller: Option<Credentials>,
}

/// One call moto checked against IAM (`scripts/moto-server.py --calls`).
#[derive(Debug, Deserialize)]
pub struct Call {
    /// The caller's access key id.
    pub key: String,
    /// `service:Action`, as a policy names it.
    pub action: String,
    /// Whether the caller's policies allowed it.
    pub allowed: bool,
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The Python of the pinned tools' venv, where moto is installed.
pub fn python() -> PathBuf {
    let python = Command::new(root().join("scripts/python-tools.sh"))
        .args(["bin", "python"])
        .output()
        .expect("run scripts/python-tools.sh");
    assert!(
        python.status.success(),
        "{}",
        String::from_utf8_lossy(&python.stderr)
    );
    PathBuf::from(String::from_utf8(python.stdout).expect("a path").trim())
}

impl Moto {
    /// Starts moto with these public SSM parameters (name, value) loaded.
    pub fn start(name: &str, ssm_parameters: &[(&str, &str)]) -> Moto {
        let python = python();
        let dir = std::env::temp_dir().join(format!("kerf-moto-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let parameters: serde_json::Map<String, serde_json::Value> = ssm_parameters
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let file = dir.join("ssm-parameters.json");
        std::fs::write(&file, serde_json::Value::Object(parameters).to_string())
            .expect("write the parameters");
        let port = port::free_port();
        let log = std::fs::File::create(dir.join("moto.log")).expect("moto log");
        std::fs::write(dir.join("capacity-reservations.json"), "[]").expect("no reservations");
        std::fs::write(dir.join("instance-status.json"), "{}").expect("no failed checks");
        let child = Command::new(&python)
            .arg(root().join("scripts/moto-server.py"))
            .args(["--port", &port.to_string(), "--ssm-parameters"])
            .arg(&file)
            .arg("--refuse-spot")
            .arg(dir.join("refuse-spot"))
            .arg("--capacity-reservations")
            .arg(dir.join("capacity-reservations.json"))
            .arg("--instance-status")
            .arg(dir.join("instance-status.json"))
            .arg("--calls")
            .arg(dir.join("calls.jsonl"))
            .arg("--zonal-shifts")
            .arg(dir.join("zonal-shifts.json"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start moto");
        let moto = Moto {
            child,
            port,
            dir: TempDir(dir.clone()),
            admin: None,
            controller: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto did not listen on {port} within 30 s: {}",
                std::fs::read_to_string(dir.join("moto.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// Plays a spot shortage (every spot CreateFleet refused for capacity) or ends it.
    pub fn refuse_spot(&self, refuse: bool) {
        let file = self.dir.0.join("refuse-spot");
        if refuse {
            std::fs::write(&file, "spot\n").expect("write the refusal file");
        } else {
            let _ = std::fs::remove_file(&file);
        }
    }

    /// The account's capacity reservations from now on, as `scripts/moto-server.py` reads
    /// them (`id`, `instanceType`, `zone`, `count`, `type`, `endDate`, `tags`).
    pub fn set_capacity_reservations(&self, reservations: serde_json::Value) {
        std::fs::write(
            self.dir.0.join("capacity-reservations.json"),
            reservations.to_string(),
        )
        .expect("write the reservations");
    }

    /// The EKS cluster [`CLUSTER`], as the operator looks it up.
    pub async fn create_cluster(&self) {
        aws_sdk_eks::Client::new(&self.config().await)
            .create_cluster()
            .name(CLUSTER)
            .role_arn("arn:aws:iam::123456789012:role/eks")
            .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
            .send()
            .await
            .expect("create the EKS cluster");
    }

    /// The cluster's zonal shifts from now on, as `scripts/moto-server.py` reads them
    /// (`awayFrom`, `expiryTime`, `appliedStatus`); `None`: the cluster is not enabled for
    /// zonal shift.
    pub fn set_zonal_shifts(&self, shifts: Option<serde_json::Value>) {
        let file = self.dir.0.join("zonal-shifts.json");
        match shifts {
            Some(shifts) => std::fs::write(&file, shifts.to_string()).expect("write the shifts"),
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
    }

    /// The instances' failed status checks and scheduled events from now on, as
    /// `scripts/moto-server.py` reads them (instance id -> `instance`, `system`,
    /// `impairedSince`, `events`).
    pub fn set_instance_status(&self, statuses: serde_json::Value) {
        std::fs::write(
            self.dir.0.join("instance-status.json"),
            statuses.to_string(),
        )
        .expect("write the instance statuses");
    }

    /// When each refused spot request came (seconds since the Unix epoch), with how many
    /// overrides it had.
    pub fn refused(&self) -> Vec<(f64, usize)> {
        std::fs::read_to_string(self.dir.0.join("refuse-spot.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                let n = v["overrides"].as_array().map_or(0, Vec::len);
                (v["time"].as_f64().unwrap_or(0.0), n)
            })
            .collect()
    }

    /// The server's URL, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An SDK configuration that reaches this server (as its administrator once IAM is
    /// enforced).
    pub async fn config(&self) -> aws_config::SdkConfig {
        let credentials = self
            .admin
            .clone()
            .unwrap_or_else(|| Credentials::new("test", "test", None, None, "kerf-tests"));
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(kerf_aws_provider::https_client())
            .region(Region::new(REGION))
            .endpoint_url(self.endpoint())
            .credentials_provider(credentials)
            .load()
            .await
    }

    /// Enforces IAM from now on, as AWS does: a role (`name`) holding `policy` and nothing
    /// else is assumed as a controller assumes its role ([`Moto::controller`]); the tests' own
    /// calls go on as an administrator user. Every call moto checks from then on is recorded
    /// ([`Moto::calls`]).
    pub async fn enforce_iam(&mut self, name: &str, policy: &str) {
        use aws_sdk_ec2::config::ProvideCredentials;
        let config = self.config().await;
        let iam = aws_sdk_iam::Client::new(&config);
        let everything = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#;
        iam.create_user()
            .user_name("tests")
            .send()
            .await
            .expect("create the tests' user");
        iam.put_user_policy()
            .user_name("tests")
            .policy_name("everything")
            .policy_document(everything)
            .send()
            .await
            .expect("allow the tests everything");
        let key = iam
            .create_access_key()
            .user_name("tests")
            .send()
            .await
            .expect("the tests' access key")
            .access_key
            .expect("an access key");
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}"#;
        let role = iam
            .create_role()
            .role_name(name)
            .assume_role_policy_document(trust)
            .send()
            .await
            .expect("create the controller's role")
            .role
            .expect("a role");
        let arn = iam
            .create_policy()
            .policy_name(format!("{name}-policy"))
            .policy_document(policy)
            .send()
            .await
            .expect("create the controller's policy")
            .policy
            .and_then(|p| p.arn)
            .expect("a policy arn");
        iam.attach_role_policy()
            .role_name(name)
            .policy_arn(arn)
            .send()
            .await
            .expect("attach the policy");
        let assumed = aws_config::sts::AssumeRoleProvider::builder(role.arn)
            .session_name("kerf-operator")
            .configure(&config)
            .build()
            .await
            .provide_credentials()
            .await
            .expect("assume the controller's role");
        let answer = post(self.port, "/moto-api/reset-auth", "0");
        assert!(answer.contains("ok"), "moto did not enforce IAM: {answer}");
        self.admin = Some(Credentials::new(
            key.access_key_id,
            key.secret_access_key,
            None,
            None,
            "kerf-tests-admin",
        ));
        self.controller = Some(assumed);
    }

    /// The credentials a controller is given: the role's once IAM is enforced, else any.
    pub fn controller(&self) -> Credentials {
        self.controller
            .clone()
            .unwrap_or_else(|| Credentials::new("test", "test", None, None, "kerf-tests"))
    }

    /// The calls moto checked against IAM since it was enforced.
    pub fn calls(&self) -> Vec<Call> {
        std::fs::read_to_string(self.dir.0.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// A plain-text POST to moto's own API on 127.0.0.1 (HTTP/1.0: the answer ends when moto closes
/// the connection).
fn post(port: u16, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("reach moto");
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send to moto");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("moto's answer");
    answer
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub const CLUSTER: &str = "gasida-karpenter-demo";
pub const NOW: i64 = 1_795_000_000;
/// An arm64 Amazon Linux 2023 image moto (5.2.5, pinned) ships in every region.
pub const ARM64_IMAGE: &str = "ami-0f1b193e4899d91a2";

/// The SSM parameters of the seed's pinned AL2023 release: moto's EKS image for x86_64, one
/// of moto's Amazon arm64 images for arm64, and no GPU builds published.
pub const SEED_AMI_PARAMETERS: [(&str, &str); 2] = [
    (
        "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.33-v20250228/image_id",
        "ami-ekslinux",
    ),
    (
        "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.33-v20250228/image_id",
        ARM64_IMAGE,
    ),
];

/// The EC2NodeClass of seed 004's getting-started manifests.
pub fn seed_node_class() -> EC2NodeClass {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/seeds/004-getting-started.yaml"),
    )
    .expect("the seed fixture");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("YAML"))
        .find(|doc| doc["kind"] == "EC2NodeClass")
        .map(|doc| serde_yaml::from_value(doc).expect("an EC2NodeClass"))
        .expect("the seed has an EC2NodeClass")
}

pub fn tags(pairs: &[(&str, &str)], kind: ResourceType) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(
            pairs
                .iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

/// A VPC with two discovery-tagged subnets (a /24 and a /20), an untagged one, and a tagged
/// and an untagged security group; returns the subnets' and the tagged group's ids.
pub async fn network(ec2: &aws_sdk_ec2::Client) -> (String, String, String) {
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("create vpc");
    let vpc = vpc
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_string();
    let discovery = [("karpenter.sh/discovery", CLUSTER)];
    let mut ids = Vec::new();
    for (cidr, zone, tagged) in [
        ("10.0.0.0/24", "ap-northeast-2a", true),
        ("10.0.16.0/20", "ap-northeast-2c", true),
        ("10.0.1.0/24", "ap-northeast-2b", false),
    ] {
        let mut req = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(zone);
        if tagged {
            req = req.tag_specifications(tags(&discovery, ResourceType::Subnet));
        }
        let out = req.send().await.expect("create subnet");
        ids.push(
            out.subnet()
                .and_then(|s| s.subnet_id())
                .expect("id")
                .to_string(),
        );
    }
    let group = ec2
        .create_security_group()
        .group_name("nodes")
        .description("nodes")
        .vpc_id(&vpc)
        .tag_specifications(tags(&discovery, ResourceType::SecurityGroup))
        .send()
        .await
        .expect("create security group");
    ec2.create_security_group()
        .group_name("other")
        .description("other")
        .vpc_id(&vpc)
        .send()
        .await
        .expect("create security group");
    (
        ids[0].clone(),
        ids[1].clone(),
        group.group_id().expect("group id").to_string(),
    )
}

/// What EC2 says about an instance launched for `nodeclaim` of `nodepool`, checked against
/// the class it was launched from. Read independently of Kerf's launch code, from the class's
/// spec and status as the API server holds them: the security groups (drift is judged by
/// them), the subnet and its zone, the AMI, the instance profile, the user data joining the
/// cluster, the tags and the metadata options. Returns every mismatch.
pub async fn check_launched(
    ec2: &aws_sdk_ec2::Client,
    instance_id: &str,
    class_name: &str,
    class: &EC2NodeClass,
    nodeclaim: &str,
    nodepool: &str,
) -> Result<(), Vec<String>> {
    use base64::Engine as _;
    use std::collections::BTreeSet;

    let status = class.status.clone().unwrap_or_default();
    let spec = &class.spec;
    let mut wrong = Vec::new();
    let described = ec2
        .describe_instances()
        .instance_ids(instance_id)
        .send()
        .await
        .map_err(|e| vec![format!("describe {instance_id}: {e}")])?;
    let Some(instance) = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
    else {
        return Err(vec![format!("{instance_id} not found")]);
    };

    let groups: BTreeSet<&str> = instance
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id())
        .collect();
    let want: BTreeSet<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    if groups != want {
        wrong.push(format!("SecurityGroups {groups:?}, the class has {want:?}"));
    }
    let zone = instance
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default();
    let subnet = instance.subnet_id().unwrap_or_default();
    if !status
        .subnets
        .iter()
        .any(|s| s.id == subnet && s.zone == zone)
    {
        wrong.push(format!(
            "SubnetId {subnet} in {zone} is not one of the class's subnets"
        ));
    }
    let image = instance.image_id().unwrap_or_default();
    if !status.amis.iter().any(|a| a.id == image) {
        wrong.push(format!("ImageId {image} is not one of the class's AMIs"));
    }
    let profile = instance
        .iam_instance_profile()
        .and_then(|p| p.arn())
        .unwrap_or_default();
    match status.instance_profile.as_deref() {
        Some(name) if profile.ends_with(&format!("/{name}")) => {}
        name => wrong.push(format!(
            "IamInstanceProfile {profile:?}, the class has {name:?}"
        )),
    }

    let user_data = ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .ok()
        .and_then(|a| a.user_data().and_then(|v| v.value()).map(str::to_string))
        .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default();
    for needed in [
        format!("name: {CLUSTER}"),
        format!("karpenter.sh/nodepool={nodepool}"),
    ] {
        if !user_data.contains(&needed) {
            wrong.push(format!("UserData lacks {needed:?}: {user_data:?}"));
        }
    }

    let tag = |key: &str| {
        instance
            .tags()
            .iter()
            .find(|t| t.key() == Some(key))
            .and_then(|t| t.value())
    };
    let mut tags = vec![
        ("karpenter.sh/nodeclaim".to_string(), nodeclaim.to_string()),
        ("karpenter.sh/nodepool".into(), nodepool.into()),
        ("karpenter.k8s.aws/ec2nodeclass".into(), class_name.into()),
        ("eks:eks-cluster-name".into(), CLUSTER.into()),
        (format!("kubernetes.io/cluster/{CLUSTER}"), "owned".into()),
    ];
    tags.extend(spec.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (key, value) in tags {
        if tag(&key) != Some(value.as_str()) {
            wrong.push(format!("tag {key}={:?}, want {value:?}", tag(&key)));
        }
    }

    // the class's metadata options, Karpenter's defaults where it says nothing
    let options = &spec.metadata_options;
    let text = |v: serde_json::Value, default: &str| {
        v.as_str().map_or(default.to_string(), str::to_string)
    };
    let want = (
        text(serde_json::json!(options.http_tokens), "required"),
        options.http_put_response_hop_limit.unwrap_or(1),
        text(serde_json::json!(options.http_endpoint), "enabled"),
    );
    let got = instance.metadata_options().map(|m| {
        (
            m.http_tokens().map(|t| t.as_str().to_string()),
            m.http_put_response_hop_limit().map(i64::from),
            m.http_endpoint().map(|e| e.as_str().to_string()),
        )
    });
    if got != Some((Some(want.0.clone()), Some(want.1), Some(want.2.clone()))) {
        wrong.push(format!("MetadataOptions {got:?}, want {want:?}"));
    }
    if wrong.is_empty() { Ok(()) } else { Err(wrong) }
}
